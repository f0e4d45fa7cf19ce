"""deploy/systemd/siding.service stops siding the way that drains: SIGTERM to siding alone,
time for the default drain and Spark's stop, restarts only on a failure, never as root."""

from __future__ import annotations

import configparser
from pathlib import Path

from siding.config import parse_config

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "siding.service"
SPARK_STOP_S = 15.0  # Spark's own stop after the drain (docs/operations.md)
ROUTE = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:50051"
"""


def service() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(strict=True, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(UNIT.read_text())
    return unit["Service"]


def test_a_stop_sends_sigterm_to_siding_alone_and_waits_for_the_default_drain() -> None:
    unit = service()
    assert unit["KillSignal"] == "SIGTERM"
    # control-group would signal Spark's JVM and Python workers too (they share the cgroup)
    assert unit["KillMode"] == "mixed"
    default_drain_s = parse_config(ROUTE).route[0].drain_timeout_s
    assert float(unit["TimeoutStopSec"]) >= default_drain_s + SPARK_STOP_S


def test_it_runs_the_config_as_a_user_and_restarts_only_on_a_failure() -> None:
    unit = service()
    assert unit["User"] not in ("", "root")
    assert unit["Restart"] == "on-failure"
    assert unit["ExecStart"].split()[1:4] == ["run", "-c", "/etc/siding/siding.toml"]
