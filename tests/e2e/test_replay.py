"""A batch run again after its Python worker was SIGKILLed leaves out what it had ACKed
(docs/replay.md): nothing lost, and only the calls in flight come again."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.model import delivery_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def python_workers() -> list[int]:
    """Spark's Python workers below this process: the children of its pyspark daemon."""
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

    daemon = b"pyspark.daemon"
    return [
        pid
        for pid, ppid in parent.items()
        if daemon in command.get(pid, b"") and daemon in command.get(ppid, b"") and mine(pid)
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
