"""Two ``siding run`` processes on one route and one checkpoint folder, as two nodes sharing an
object store would: the fence in Kafka decides which one delivers (docs/operations.md, "Two
drivers for one route: the fence")."""

from __future__ import annotations

import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from siding import naming
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_consumer import Behaviour, Fate, plan, read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.kafka.reader import watermarks_of
from siding.model import delivery_id
from tests.e2e.test_process import _kill_group, _siding_run, _write_config

FENCE = '[fence]\nenabled = true\nlease = "4s"\nrenew = "1s"\n'


def _says(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


def test_split_brain_the_frozen_driver_writes_nothing_after_the_standby_took_over(
    kafka: EmbeddedKafka,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> None:
    # Given a route whose consumer dead-letters 5 %, run by driver A with a fenced checkpoint
    # and by a standby B on the same checkpoint folder (each its own log)
    topic = topic_name("fence")
    behaviour = {"latency_s": (0.01, 0.05), "dead_ratio": 0.05}
    sim, received_file = sim_consumer(**behaviour)
    route = {
        "name": "fence",
        "topic": topic,
        "group": "fence-group",
        "endpoint": f"grpc://{sim.target}",
        "max_offsets_per_trigger": 50,
        "dlq_flood_min_batch": 1_000_000,
    }
    text = config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", trigger="100ms")
    text = text.replace("[[route]]", FENCE + "[[route]]")
    config = _write_config(tmp_path / "siding.toml", text)
    watcher = PipelineRun(parse_config(text))
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    produce(kafka.bootstrap, topic, 300)
    a = _siding_run(config, log_a)
    b = None
    try:
        wait_until(
            partial(_says, log_a, "holds its fence (epoch"), timeout_s=120, what="A holds the fence"
        )
        b = _siding_run(config, log_b, args=("--standby",))
        wait_until(
            partial(_says, log_b, "waiting for the routes' fences"), timeout_s=120, what="B waits"
        )
        watcher.wait_committed({0: 300}, timeout_s=120)
        assert not _says(log_b, "holds its fence")  # exactly one delivers

        # When A's whole process group is frozen past its lease while messages keep coming
        _kill_group(a, signal.SIGSTOP)
        produce(kafka.bootstrap, topic, 300, start_seq=300)
        # Then B takes the route over from the same checkpoint and delivers them
        wait_until(
            partial(_says, log_b, "holds its fence (epoch 2)"), timeout_s=60, what="B takes over"
        )
        watcher.wait_committed({0: 600}, timeout_s=120)
        # (B is idle now: what its records topics and group hold may change only through A)
        written = _records_written(watcher, "fence")
        committed = watcher.committed()
        # When A resumes, it stops with one line, non-zero, no trace
        _kill_group(a, signal.SIGCONT)
        a.wait(60)
        assert a.returncode != 0
        text_a = log_a.read_text(errors="replace")
        assert "Traceback" not in text_a
        last = text_a.strip().splitlines()[-1]
        assert "fence" in last and "stopped, nothing committed" in last, last
        # And nothing A did after it lost the fence reached a lane, park, hold or DLQ topic,
        # a settlement or the group's offsets
        assert _records_written(watcher, "fence") == written
        assert watcher.committed() == committed
        # And B goes on delivering
        produce(kafka.bootstrap, topic, 60, start_seq=600)
        watcher.wait_committed({0: 660}, timeout_s=120)
    finally:
        _kill_group(a, signal.SIGCONT)
        _kill_group(a, signal.SIGKILL)
        if b is not None:
            _kill_group(b, signal.SIGTERM)
            b.wait(60)
    assert b.returncode == 0, log_b.read_text()[-3000:]

    _nothing_lost(watcher, topic, received_file, Behaviour(**behaviour), 660)  # type: ignore[arg-type]
    assert watcher.committed()[0] == 660


def _nothing_lost(
    watcher: PipelineRun, topic: str, received_file: Path, model: Behaviour, count: int
) -> None:
    expected = {delivery_id(topic, 0, o) for o in range(count)}
    dead = {i for i in expected if plan(model, i, 1).fate is Fate.DEAD}
    in_dlq = {x.story.origin.delivery_id for x in watcher.dead_letters() if x.story}
    acked = {r.delivery_id for r in read_records(received_file)} - dead
    assert acked | in_dlq == expected
    assert in_dlq == dead


def _records_written(watcher: PipelineRun, route: str) -> dict[str, dict[int, int]]:
    """The end offsets of the route's record topics and settlements (not its progress, live
    and fence records, which a running driver writes while idle)."""
    topics = naming.owned_topics(route, 0)
    names = [t.name for t in topics.all if t.carries_records]
    names.append(naming.state_topic(route, naming.SETTLED))
    return {name: watermarks_of(watcher.client_conf, name) for name in names}
