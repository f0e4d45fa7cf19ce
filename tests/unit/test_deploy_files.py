"""The dashboard and the alert rules under deploy/ use only metrics that siding exports, with the
labels siding gives them, and the rules fire when they should (promtool)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from siding.control import QueryHealth
from siding.control.kafka_view import RouteKafka, lane_backlog, partition_lag
from siding.control.prometheus import metrics_registry, render
from siding.dispatch import DispatchStats
from siding.pipeline.driver.metrics import MetricsSink
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "siding-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "siding.json"
EXTERNAL: set[str] = set()  # metrics of other exporters the files may use
PROMQL_WORDS = {"sum", "by", "rate", "increase", "deriv", "and", "histogram_quantile", "le"}


def exported() -> dict[str, set[str]]:
    """Every sample name siding's /metrics can show, with its label names."""
    sink = MetricsSink()
    stats = DispatchStats(suspected=1, isolations=1, convicted=1)
    sink.on_result(
        "r",
        0,
        [TaskResult(counts=StepCounts(records=2, to_dlq=1), stats=stats, dead_reasons={"x": 1})],
        1,
    )
    sink.on_page("r", False, 2)
    facts = RouteKafka(
        partitions=(partition_lag("t", 0, 0, 10, 4),),
        lanes=(lane_backlog("retry-1", "l", [], [5_000]),),
        dlq_size=1,
        in_flight=(("main", 3),),
        in_flight_at_ms=1,
    )
    registry = metrics_registry(
        sink.snapshot, lambda: [QueryHealth("siding.r.main", True)], lambda _: facts
    )
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(render(registry).decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def metric_names(expr: str) -> set[str]:
    words = set(re.findall(r"\b[a-z_][a-z0-9_]*\b(?=\s*[{\[)\s]|$)", expr))
    return {w for w in words if w.startswith(("siding_", "kafka_"))} - PROMQL_WORDS


def rule_exprs() -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^\s+expr:\s*(.+)$", RULES.read_text(), re.M)]


def test_the_alert_rules_name_only_exported_metrics() -> None:
    names = exported()
    exprs = rule_exprs()
    assert len(exprs) == len(re.findall(r"^\s+- alert: Siding\w+$", RULES.read_text(), re.M)) >= 5
    for expr in exprs:
        for name in metric_names(expr):
            assert name in names or name in EXTERNAL, f"{name} in {expr!r} is not exported"


def test_the_dashboard_names_only_exported_metrics_and_labels() -> None:
    names = exported()
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    assert len(exprs) >= 9
    for expr in exprs:
        for name in metric_names(expr):
            assert name in names, f"{name} in {expr!r} is not exported"
        for label in re.findall(r"by \(([^)]*)\)", expr):
            for part in label.split(","):
                wanted = part.strip()
                assert any(wanted in labels for labels in names.values()), (wanted, expr)


def test_in_flight_is_named_for_what_it_is() -> None:
    """``siding_in_flight`` is a gauge of now (the workers' live reports); the last batch's
    peak has its own name."""
    names = exported()
    assert names["siding_in_flight_peak"] == {"route", "lane"}
    assert names["siding_in_flight"] == {"route", "lane"}
    assert names["siding_query_up"] == {"query"}


def tool(name: str) -> str:
    """The path of a tool from Debian's packages (``make setup`` installs it where it can)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is needed (make setup installs it with apt)")
        pytest.skip(f"{name} not installed")
    return path


def test_the_alert_rules_pass_promtool() -> None:
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(RULES)], check=False, capture_output=True
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert b"SUCCESS: 8 rules found" in done.stdout


LAG_TEST = """
rule_files: [RULES]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # route a falls behind by 50 records a minute; route b is steady at 5,000
      - series: 'siding_consumer_lag_records{route="a",topic="t",partition="0"}'
        values: '1000+50x40'
      - series: 'siding_consumer_lag_records{route="b",topic="u",partition="0"}'
        values: '5000x40'
    alert_rule_test:
      - eval_time: 35m
        alertname: SidingLagGrowing
        exp_alerts:
          - exp_labels: {severity: page, route: a}
            exp_annotations:
              summary: "siding route a is falling behind its source topic"
              description: "Lag over 1,000 and still growing for 15 minutes."
"""


def test_the_lag_alert_fires_for_a_growing_lag_only(tmp_path: Path) -> None:
    case = tmp_path / "lag-test.yml"
    case.write_text(LAG_TEST.replace("RULES", str(RULES)))
    done = subprocess.run(
        [tool("promtool"), "test", "rules", str(case)], check=False, capture_output=True
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


DEAD_LETTER_TEST = """
rule_files: [RULES]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # route a dead-letters one record at minute 5; route b none
      - series: 'siding_records_total{route="a",lane="main",outcome="dlq"}'
        values: '0x4 1x30'
      - series: 'siding_records_total{route="b",lane="main",outcome="dlq"}'
        values: '0x35'
    alert_rule_test:
      - eval_time: 4m
        alertname: SidingDeadLetter
        exp_alerts: []
      - eval_time: 6m
        alertname: SidingDeadLetter
        exp_alerts:
          - exp_labels: {severity: ticket, route: a}
            exp_annotations:
              summary: "siding route a dead-lettered a record in the last 15 minutes"
              description: "`siding dlq list --route a --since 15m` shows why."
      - eval_time: 6m
        alertname: SidingDeadLetters
        exp_alerts: []
      - eval_time: 25m
        alertname: SidingDeadLetter
        exp_alerts: []
"""


def test_one_dead_letter_fires_the_dead_letter_alert_and_only_for_a_while(tmp_path: Path) -> None:
    case = tmp_path / "dead-letter-test.yml"
    case.write_text(DEAD_LETTER_TEST.replace("RULES", str(RULES)))
    done = subprocess.run(
        [tool("promtool"), "test", "rules", str(case)], check=False, capture_output=True
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
