"""A route whose checkpoint is on object storage (``s3a://``, a real S3Proxy server on
loopback): Spark's checkpoint and siding's own files are there, a SIGKILL of `siding run` and a
restart on the same checkpoint lose nothing, and `siding offsets show` reads it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from siding.config import SidingConfig, parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.s3_server import S3Server
from siding.devkit.sim_consumer import read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.errors import SidingError
from siding.model import delivery_id
from siding.pipeline.offline.checkpoint_root import route_place
from tests.conftest import unavailable

SimFactory = Callable[..., Any]
_ENTRY = "from siding.cli.main import main; main()"


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    server = S3Server(folder=tmp_path / "s3")
    try:
        server.start()
    except (SidingError, OSError) as exc:
        unavailable("the S3 server (S3Proxy)", exc)
    try:
        yield server
    finally:
        server.stop()


def _siding(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", _ENTRY, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **env},
        )


def _with_s3_conf(text: str, s3: S3Server) -> str:
    """``text`` with the server's endpoint in ``[spark.conf]`` (its credentials are not: the
    runs take them from the environment)."""
    conf = {k: v for k, v in s3.hadoop_conf().items() if not k.endswith(".key")}
    return text + "[spark.conf]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in conf.items())


def _files_on_s3(config: SidingConfig, route: str, env: dict[str, str]) -> list[str]:
    """The Spark offset-log batches of ``route``'s main lane, if siding's owner file is there
    too, read through the storage interface from this process."""
    os.environ.update(env)
    try:
        place = route_place(config, route)
        if not (place / "siding-owner.json").exists():
            return []
        return [p.name for p in (place / "main" / "offsets").iterdir() if p.name.isdigit()]
    finally:
        for key in env:
            os.environ.pop(key)


def _running(proc: subprocess.Popen[bytes], log: Path) -> Callable[[], None]:
    """A ``wait_until`` check: a run that exited will commit nothing more; say why at once
    (its last lines) instead of waiting out the timeout."""

    def check() -> None:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise AssertionError(f"siding run exited {proc.returncode}: " + "\n".join(tail))

    return check


def _offsets_show(config_file: Path, route: str, env: dict[str, str], out: Path) -> Any:
    show = _siding(
        ["offsets", "show", "-c", str(config_file), "--route", route, "--json"], out, env
    )
    assert show.wait(180) == 0, out.read_text()
    return json.loads(out.read_text().strip().splitlines()[-1])


def test_a_route_checkpointed_on_s3_survives_a_sigkill_and_offsets_show_reads_it(
    kafka: EmbeddedKafka,
    s3: S3Server,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given 600 messages, a consumer answering in 10-30 ms, and a route whose checkpoint is on
    # the S3 server: its endpoint in [spark.conf], its credentials in the environment
    count = 600
    topic = topic_name("s3")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(latency_s=(0.01, 0.03))
    route = {
        "name": "s3route",
        "topic": topic,
        "group": "s3-group",
        "endpoint": f"grpc://{sim.target}",
        "max_in_flight": 20,
        "max_offsets_per_trigger": 100,
        "deadline": "10s",
    }
    checkpoint_dir = "s3a://siding/checkpoints"
    text = config_text(kafka.bootstrap, route, checkpoint_dir=checkpoint_dir, trigger="100ms")
    text = _with_s3_conf(text, s3)
    config_file = tmp_path / "siding.toml"
    config_file.write_text(text)
    config = parse_config(text)
    env = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
    log = tmp_path / "siding.log"
    watcher = PipelineRun(config)  # reads the group's offsets; never started

    def received() -> int:
        return len(read_records(received_file)) if received_file.exists() else 0

    # When `siding run` is SIGKILLed (its process group) once a third has been delivered
    run = ["run", "-c", str(config_file)]
    proc = _siding(run, log, env)
    try:
        wait_until(
            lambda: received() >= 200, timeout_s=240, what="deliveries", check=_running(proc, log)
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    # Then Spark's checkpoint and siding's owner file are on the S3 server
    assert _files_on_s3(config, "s3route", env)
    # And a second run on the same checkpoint takes the route over once the killed run's lease
    # runs out (it is not refused: the killed run renews nothing), finishes the work and stops
    # cleanly
    proc = _siding(run, log, env)
    try:
        running = _running(proc, log)
        wait_until(
            lambda: "holds its fence (epoch 2)" in log.read_text(errors="replace"),
            timeout_s=120,
            what="the fence taken over",
            check=running,
        )
        wait_until(
            lambda: watcher.committed().get(0, -1) >= count,
            timeout_s=180,
            what=f"group offsets {count}",
            check=running,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
    output = log.read_text(errors="replace")
    assert proc.returncode == 0, output[-3000:]
    # A remote checkpoint is guarded by the route's fence in Kafka (on by default there), not a
    # local lock; the restart took it over at the next epoch
    assert "route s3route: holds its fence (epoch 2)" in output
    # Nothing lost: every message produced was ACKed by the consumer
    expected = {delivery_id(topic, 0, o) for o in range(count)}
    assert {r.delivery_id for r in read_records(received_file)} == expected
    # And `siding offsets show` reads the checkpoint on the S3 server: it ends at the log end
    shown_log = tmp_path / "show.json"
    show = _siding(
        ["offsets", "show", "-c", str(config_file), "--route", "s3route", "--json"], shown_log, env
    )
    assert show.wait(180) == 0, shown_log.read_text()
    shown = json.loads(shown_log.read_text().strip().splitlines()[-1])
    assert shown["checkpoint"] == f"{checkpoint_dir}/s3route/main"
    assert [(p["checkpoint"], p["log_end"]) for p in shown["partitions"]] == [(count, count)]
    # And the secret was never shown
    assert s3.secret_key not in output and s3.secret_key not in shown_log.read_text()
