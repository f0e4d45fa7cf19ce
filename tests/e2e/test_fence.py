"""Three ``siding run`` processes on one route and one checkpoint folder, as nodes sharing an
object store would: the fence in Kafka decides which one delivers (docs/operations.md, "Two
drivers for one route: the fence"). One scenario, so that its three Spark starts are shared:
two drivers with exactly one delivering, a split brain (the active frozen past its lease,
then resumed), and a SIGKILL of the active that its standby takes over."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

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

# Three Spark starts in one scenario: at load 25 on 2 cores one took 3 minutes, and the first
# batch 90 s more (the suite's 600 s was not enough for the first two drivers).
pytestmark = pytest.mark.timeout(2400)
FENCE = '[fence]\nenabled = true\nlease = "6s"\nrenew = "1s"\n'
# Each run's `siding run` logs are kept here (pytest removes tmp_path): read them after a failure.
LOGS = Path(__file__).resolve().parents[2] / "build" / "e2e-logs" / "fence"
# A Spark start and its first batch on a loaded 2-core machine (load 25) have taken five minutes.
SPARK_START_S = 600
WAITING = "waiting for the routes' fences"


def _says(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


def test_one_driver_delivers_a_frozen_one_writes_nothing_and_a_standby_takes_over_a_kill(
    kafka: EmbeddedKafka,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> None:
    # Given a route whose consumer dead-letters 5 %, on one fenced checkpoint folder; each
    # driver process calls its own consumer, so the consumers tell which driver delivered
    topic = topic_name("fence")
    behaviour = {"latency_s": (0.01, 0.05), "dead_ratio": 0.05}
    sims = [sim_consumer(**behaviour) for _ in "abc"]
    route = {
        "name": "fence",
        "topic": topic,
        "group": "fence-group",
        "max_offsets_per_trigger": 50,
        "dlq_flood_min_batch": 1_000_000,
    }
    configs = []
    for name, (sim, _) in zip("abc", sims, strict=True):
        text = config_text(
            kafka.bootstrap,
            {**route, "endpoint": f"grpc://{sim.target}"},
            checkpoint_dir=tmp_path / "ckpt",
            trigger="100ms",
        )
        text = text.replace("[[route]]", FENCE + "[[route]]")
        configs.append(_write_config(tmp_path / f"siding-{name}.toml", text))
    watcher = PipelineRun(parse_config(configs[0].read_text()))
    logs = _logs("a", "b", "c")
    received = [file for _, file in sims]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        a, b = _one_delivers(kafka, topic, configs, logs, received, watcher, procs)
        _split_brain(kafka, topic, a, logs, watcher)
        _standby_takes_over_a_kill(kafka, topic, b, configs, logs, received, watcher, procs)
    except BaseException as exc:
        exc.add_note(_tails(logs))
        raise
    finally:
        for proc in procs:
            _kill_group(proc, signal.SIGCONT)
            _kill_group(proc, signal.SIGKILL)
            proc.wait(60)

    # And nothing is lost: every message was ACKed by some driver's consumer or dead-lettered
    _nothing_lost(watcher, topic, received, Behaviour(**behaviour), 900)  # type: ignore[arg-type]
    assert watcher.committed()[0] == 900


Procs = list[subprocess.Popen[bytes]]


def _one_delivers(
    kafka: EmbeddedKafka,
    topic: str,
    configs: list[Path],
    logs: tuple[Path, ...],
    received: list[Path],
    watcher: PipelineRun,
    procs: Procs,
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    # When driver A runs the route and B starts as its standby
    produce(kafka.bootstrap, topic, 300)
    a = _siding_run(configs[0], logs[0])
    procs.append(a)
    watcher.wait_committed({0: 300}, timeout_s=SPARK_START_S)
    assert _says(logs[0], "holds its fence (epoch 1)")
    b = _siding_run(configs[1], logs[1], args=("--standby",))
    procs.append(b)
    wait_until(partial(_says, logs[1], WAITING), timeout_s=SPARK_START_S, what="B waits")
    produce(kafka.bootstrap, topic, 200, start_seq=300)
    watcher.wait_committed({0: 500}, timeout_s=240)
    # Then exactly one delivers: A; B's consumer was called by nobody
    assert read_records(received[1]) == []
    assert not _says(logs[1], "holds its fence")
    return a, b


def _split_brain(
    kafka: EmbeddedKafka,
    topic: str,
    a: subprocess.Popen[bytes],
    logs: tuple[Path, ...],
    watcher: PipelineRun,
) -> None:
    # When A's whole process group is frozen past its lease while messages keep coming
    _kill_group(a, signal.SIGSTOP)
    produce(kafka.bootstrap, topic, 200, start_seq=500)
    # Then B takes the route over from the same checkpoint and delivers them
    wait_until(
        partial(_says, logs[1], "holds its fence (epoch 2)"), timeout_s=120, what="B takes over"
    )
    watcher.wait_committed({0: 700}, timeout_s=240)
    # (B is idle now: what its records topics and group hold may change only through A)
    written = _records_written(watcher, "fence")
    committed = watcher.committed()
    # When A resumes, it stops with one line, non-zero, no trace
    _kill_group(a, signal.SIGCONT)
    a.wait(180)
    assert a.returncode != 0
    text_a = logs[0].read_text(errors="replace")
    assert "Traceback" not in text_a
    last = text_a.strip().splitlines()[-1]
    assert "fence" in last and "stopped, nothing committed" in last, last
    # And nothing A did after it lost the fence reached a lane, park, hold or DLQ topic,
    # a settlement or the group's offsets
    assert _records_written(watcher, "fence") == written
    assert watcher.committed() == committed


def _standby_takes_over_a_kill(
    kafka: EmbeddedKafka,
    topic: str,
    b: subprocess.Popen[bytes],
    configs: list[Path],
    logs: tuple[Path, ...],
    received: list[Path],
    watcher: PipelineRun,
    procs: Procs,
) -> None:
    # When C starts as B's standby, and B's process group is killed (SIGKILL)
    c = _siding_run(configs[2], logs[2], args=("--standby",))
    procs.append(c)
    wait_until(partial(_says, logs[2], WAITING), timeout_s=SPARK_START_S, what="C waits")
    produce(kafka.bootstrap, topic, 100, start_seq=700)
    watcher.wait_committed({0: 800}, timeout_s=240)
    assert read_records(received[2]) == []  # C delivered nothing while B ran
    _kill_group(b, signal.SIGKILL)
    killed_at = time.time()
    produce(kafka.bootstrap, topic, 100, start_seq=800)
    # Then C takes the route over and delivers again
    wait_until(
        partial(_says, logs[2], "holds its fence (epoch 3)"), timeout_s=120, what="C takes over"
    )
    watcher.wait_committed({0: 900}, timeout_s=240)
    first = min(r.received_s for r in read_records(received[2]))
    print(f"fence e2e: C's first delivery {first - killed_at:.1f}s after B's SIGKILL")
    # And a standby stopped by SIGTERM drains and exits cleanly
    _kill_group(c, signal.SIGTERM)
    c.wait(180)
    assert c.returncode == 0


def _logs(*names: str) -> tuple[Path, ...]:
    """Fresh log files, one per driver (pytest's tmp_path is gone after a failure)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    logs = tuple(LOGS / f"{name}.log" for name in names)
    for log in logs:
        log.unlink(missing_ok=True)
    return logs


def _tails(logs: tuple[Path, ...], lines: int = 15) -> str:
    parts = []
    for log in logs:
        text = log.read_text(errors="replace") if log.exists() else "(no log)"
        parts.append(f"--- {log} (last {lines} lines)\n" + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(parts)


def _nothing_lost(
    watcher: PipelineRun, topic: str, received: list[Path], model: Behaviour, count: int
) -> None:
    expected = {delivery_id(topic, 0, o) for o in range(count)}
    dead = {i for i in expected if plan(model, i, 1).fate is Fate.DEAD}
    in_dlq = {x.story.origin.delivery_id for x in watcher.dead_letters() if x.story}
    acked = {r.delivery_id for file in received for r in read_records(file)} - dead
    assert acked | in_dlq == expected
    assert in_dlq == dead


def _records_written(watcher: PipelineRun, route: str) -> dict[str, dict[int, int]]:
    """The end offsets of the route's record topics and settlements (not its progress, live
    and fence records, which a running driver writes while idle)."""
    topics = naming.owned_topics(route, 0)
    names = [t.name for t in topics.all if t.carries_records]
    names.append(naming.state_topic(route, naming.SETTLED))
    return {name: watermarks_of(watcher.client_conf, name) for name in names}
