"""A batch run again after a crash leaves out what it had ACKed (docs/replay.md): after its
Python worker was SIGKILLed, and after `siding run` was SIGKILLed during a catch-up burst;
nothing lost, and only the calls in flight plus the documented bound come again."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from siding import naming
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_consumer import read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.kafka.reader import watermarks_of
from siding.model import delivery_id
from tests.e2e.procs import python_daemon_or_worker
from tests.e2e.test_process import _kill_group, _siding_run, _write_config, skipped_on_replay

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def python_workers() -> list[int]:
    """Spark's Python workers below this process: the children of its Python daemon."""
    parent: dict[int, int] = {}
    command: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command[int(entry.name)] = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue

    def mine(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parent.get(pid, 0)
        return False

    return [
        pid
        for pid, ppid in parent.items()
        if python_daemon_or_worker(command.get(pid, b""))
        and python_daemon_or_worker(command.get(ppid, b""))
        and mine(pid)
    ]


def test_a_batch_run_again_after_its_python_worker_died_leaves_out_what_it_acked(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> None:
    # Given one batch of 600 messages, 50 calls in flight, answers in 100-200 ms
    count, in_flight = 600, 50
    topic = topic_name("replay")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(latency_s=(0.1, 0.2))
    route = {
        "name": "replay",
        "topic": topic,
        "group": "replay-group",
        "endpoint": f"grpc://{sim.target}",
        "max_in_flight": in_flight,
        "max_offsets_per_trigger": count,
        "progress_interval": "50ms",
    }

    def received() -> int:
        return len(read_records(received_file))

    run = PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
    )
    with run:
        # When the Python worker delivering it is SIGKILLed half-way through
        wait_until(lambda: received() >= count // 2, timeout_s=120, what="half", check=run.check)
        workers = python_workers()
        assert workers, "no Python worker found"
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        # Then the batch runs again (a new attempt in the driver) and commits
        run.wait_committed({0: count}, timeout_s=180)
    ids = [r.delivery_id for r in read_records(received_file)]
    assert set(ids) == {delivery_id(topic, 0, o) for o in range(count)}
    duplicates = len(ids) - len(set(ids))
    print(f"\nworker killed after {count // 2} deliveries: {duplicates} duplicates")
    # Without progress records every delivery before the kill (300) comes again; now only the
    # calls in flight and the ACKs of the last 50 ms (with slack)
    assert duplicates <= in_flight + 100


@pytest.mark.timeout(1800)  # two starts of `siding run`, each minutes on a loaded machine
def test_a_sigkill_during_a_catch_up_burst_re_delivers_at_most_the_documented_bound(
    kafka: EmbeddedKafka,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> None:
    # Given 3,000 messages produced while siding is not running (one batch catches them up), a
    # consumer answering in 2-5 ms, 50 calls in flight and a progress record every 25 ACKs.
    # The tick (progress_interval) is set far away, so only progress_every and "every call
    # answered" record ACKs: by time alone the whole burst delivered before the kill comes again.
    count, in_flight, every, tasks = 3000, 50, 25, 1
    topic = topic_name("burst")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(latency_s=(0.002, 0.005))
    route = {
        "name": "burst",
        "topic": topic,
        "group": "burst-group",
        "endpoint": f"grpc://{sim.target}",
        "max_in_flight": in_flight,
        "max_offsets_per_trigger": count,
        "progress_interval": "10s",
        "progress_every": every,
    }
    text = config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", trigger="100ms")
    config = _write_config(tmp_path / "siding.toml", text)
    log = tmp_path / "siding.log"
    watcher = PipelineRun(parse_config(text))  # reads offsets; never started

    def received() -> int:
        return len(read_records(received_file))

    # When `siding run`'s process group is SIGKILLed a third of the way through the burst
    proc = _siding_run(config, log)
    try:
        wait_until(lambda: received() >= count // 3, timeout_s=600, what="a third delivered")
    finally:
        _kill_group(proc, signal.SIGKILL)
        proc.wait(30)
    before = read_records(received_file)
    rate = (len(before) - 1) / max(before[-1].received_s - before[0].received_s, 1e-3)
    # Then a restart replays the batch, leaves out what was recorded, and commits it
    proc = _siding_run(config, log)
    try:
        watcher.wait_committed({0: count}, timeout_s=300)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, log.read_text()[-3000:]
    ids = [r.delivery_id for r in read_records(received_file)]
    assert set(ids) == {delivery_id(topic, 0, o) for o in range(count)}  # nothing lost
    duplicates = len(ids) - len(set(ids))
    skipped = skipped_on_replay(log)
    progress_records = sum(
        watermarks_of(watcher.client_conf, naming.state_topic("burst", "progress")).values()
    )
    print(
        f"\nSIGKILL after {len(before)} deliveries at {rate:.0f} msg/s: {duplicates} duplicates,"
        f" {skipped} left out on replay, {progress_records} progress records"
    )
    # docs/replay.md: the calls in flight, plus per task slot fewer than progress_every ACKs
    # not yet recorded and one record's worth (progress_every) still in the producer
    bound = in_flight + tasks * (every - 1) + tasks * every
    assert bound * 5 < len(before), "the bound must be well below what was delivered"
    assert skipped >= len(before) - bound
    assert duplicates <= bound
