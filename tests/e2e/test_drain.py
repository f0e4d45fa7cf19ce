"""A draining stop (issue 17): SIGTERM mid-flight lets the calls in flight finish, commits, and
exits 0 within the drain timeout; the next run asks nobody twice. A second signal stops at once
and still loses nothing. A normal stop prints no Java or py4j stack trace. The stop drains the
same whether the signal goes to siding's PID or to its whole process group (a service manager,
Ctrl-C) (issue 26). That a killed siding leaves no Spark process behind is checked by
tests/e2e/test_process.py's SIGKILL scenario (its last kill), which has a run to kill anyway."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

_ENTRY = "from siding.cli.main import main; main()"
DRAIN_TIMEOUT_S = 4.0
# Spark's own stop (queries, session, the JVM) on a shared two-core machine.
STOP_MARGIN_S = 12.0
RATE = 30.0
# What a stack trace leaves on stderr: Python's, py4j's, or a Java one.
_TRACE = re.compile(r"Traceback \(most recent call last\)|py4j|^\s+at [a-z]+\.[\w.$]+\(", re.M)


@dataclass(frozen=True)
class Stop:
    """How a supervisor asks siding to stop: a signal to its PID, or to its process group."""

    name: str
    sig: signal.Signals
    group: bool


STOPS = [
    Stop("sigterm-pid", signal.SIGTERM, group=False),  # `kill <pid>`, a container stop
    Stop("sigterm-group", signal.SIGTERM, group=True),  # `kill -TERM -<pgid>`, a supervisor
    Stop("sigint-group", signal.SIGINT, group=True),  # Ctrl-C in a terminal
]


class Siding:
    """One ``siding run`` process; its stderr (logs, Spark's log4j, the workers) kept apart."""

    def __init__(self, config: Path, out: Path) -> None:
        self.stderr = out.with_suffix(".err")
        with open(out, "wb") as stdout, open(self.stderr, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, "run", "-c", str(config)],
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                env=dict(os.environ),
            )

    def signal(self, stop: Stop = STOPS[0]) -> float:
        if stop.group:  # the test's own group is not siding's (start_new_session)
            os.killpg(self.proc.pid, stop.sig)
        else:
            self.proc.send_signal(stop.sig)
        return time.monotonic()

    def wait(self, timeout_s: float) -> float:
        """Wait for the exit; the time it exited (monotonic)."""
        self.proc.wait(timeout_s)
        return time.monotonic()

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    def running(self) -> bool:
        return "siding: running" in self.log()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


class Producer:
    """Produces ``count`` messages at ``rate`` a second on a thread, from ``start_seq``."""

    def __init__(
        self, bootstrap: str, topic: str, count: int, start_seq: int, rate: float = RATE
    ) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(bootstrap, topic, count, start_seq, rate), daemon=True
        )
        self._thread.start()

    def _run(self, bootstrap: str, topic: str, count: int, start_seq: int, rate: float) -> None:
        try:
            produce(bootstrap, topic, count, rate=rate, start_seq=start_seq)
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self._thread.join(120)
        assert self.error is None, self.error


@dataclass
class Scenario:
    """One route on one topic, its config file, and what the consumer received."""

    kafka: EmbeddedKafka
    topic: str
    config: Path
    received: Path
    watcher: PipelineRun

    def deliveries(self) -> Counter[str]:
        return Counter(r.delivery_id for r in read_records(self.received))

    def delivered(self) -> int:
        return sum(self.deliveries().values())

    def all_done(self, count: int) -> bool:
        """The group committed ``count`` messages and the park lane everything parked."""
        if self.watcher.committed().get(0, 0) < count:
            return False
        park_topic = naming.park_topic("drain")
        ends = watermarks_of(self.watcher.client_conf, park_topic)
        return not ends or self.watcher.committed(park_topic) == ends

    def ids(self, count: int) -> set[str]:
        return {delivery_id(self.topic, 0, o) for o in range(count)}

    def stop_mid_flight(
        self, log: Path, first: int, then: int, *, again: bool, stop: Stop = STOPS[0]
    ) -> float:
        """Start siding, produce ``then`` messages at ``RATE`` from seq ``first``, ``stop`` it
        once ``first + 90`` deliveries were made (``again``: a second signal 0.3 s later); the
        seconds the stop took."""
        run = Siding(self.config, log)
        try:
            wait_until(run.running, timeout_s=180, what="siding running")
            wait_until(lambda: self.all_done(first), timeout_s=180, what="earlier messages done")
            producer = Producer(self.kafka.bootstrap, self.topic, then, first)
            wait_until(lambda: self.delivered() >= first + 90, timeout_s=120, what="deliveries")
            asked = run.signal(stop)
            if again:
                time.sleep(0.3)
                run.signal(stop)
            stopped = run.wait(DRAIN_TIMEOUT_S + STOP_MARGIN_S + 30)
        finally:
            run.kill()
        producer.join()
        assert run.proc.returncode == 0, run.log()[-3000:]
        assert "siding: stopped cleanly" in run.log()
        if not again:  # a second signal cancels tasks: PySpark's workers may print an EOFError
            assert not _TRACE.search(run.log()), run.log()
        return stopped - asked

    def finish(self, log: Path, count: int, more: int) -> str:
        """Start siding, produce ``more`` messages (a stop at once may have left the group's
        offsets behind the checkpoint: the next batch moves them), wait until all are done,
        stop it; its log."""
        run = Siding(self.config, log)
        try:
            wait_until(run.running, timeout_s=180, what="siding running")
            produce(self.kafka.bootstrap, self.topic, more, start_seq=count)
            total = count + more
            wait_until(lambda: self.all_done(total), timeout_s=180, what=f"{total} messages done")
            run.signal()
            run.wait(DRAIN_TIMEOUT_S + STOP_MARGIN_S + 30)
        finally:
            run.kill()
        assert run.proc.returncode == 0, run.log()[-3000:]
        assert not _TRACE.search(run.log()), run.log()
        return run.log()


@pytest.fixture
def scenario(
    kafka: EmbeddedKafka,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
) -> Scenario:
    """A consumer that takes 5-10 ms, and 2.5 s for a fifth of the messages."""
    topic = topic_name("drain")
    produce(kafka.bootstrap, topic, 0)  # creates the topic
    sim, received = sim_consumer(latency_s=(0.005, 0.01), slow_ratio=0.2, slow_latency_s=2.5)
    route = {
        "name": "drain",
        "topic": topic,
        "group": "drain-group",
        "endpoint": f"grpc://{sim.target}",
        "deadline": "5s",
        "drain_timeout": f"{DRAIN_TIMEOUT_S:g}s",
        "lanes": [{"delay": "1s"}],
        "dlq_flood_min_batch": 1_000_000,
    }
    text = config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", trigger="100ms")
    config = tmp_path / "siding.toml"
    config.write_text(text)
    watcher = PipelineRun(parse_config(text))  # reads offsets and topics; never started
    return Scenario(kafka, topic, config, received, watcher)


def test_a_stop_from_any_supervisor_drains_and_a_second_signal_loses_nothing(
    scenario: Scenario, tmp_path: Path
) -> None:
    # One route, one consumer, one run after another (each start of Spark costs seconds): a run
    # per kind of stop, then a stop with a second signal, then a run that finishes the work.
    step, second = 200, 200
    done = 0
    for n, stop in enumerate(STOPS, start=1):
        # When siding gets the signal while slow calls are in flight, sent to its PID or to its
        # whole process group (where Spark's JVM was once too: it stopped the queries mid-batch)
        took_s = scenario.stop_mid_flight(
            tmp_path / f"run-{n}.log", done, step, again=False, stop=stop
        )
        print(f"\n{stop.name}: stopped {took_s:.1f}s after the signal")
        # Then it drained within the drain timeout (plus Spark's own stop), exit 0, no stack trace
        assert took_s <= DRAIN_TIMEOUT_S + STOP_MARGIN_S, stop.name
        # And its log says what the drain did: calls were in flight, and they finished
        log = (tmp_path / f"run-{n}.err").read_text()
        said = re.search(r"drain: route drain: (\d+) calls? finished, (\d+) handed to a lane", log)
        assert said is not None, (stop.name, log)
        assert int(said.group(1)) > 0, (stop.name, said.group(0))
        done += step
    drained = done

    # When siding starts again, finishes those, and a second signal follows the first during
    # the drain of more messages
    took_s = scenario.stop_mid_flight(tmp_path / "run-again.log", done, second, again=True)
    print(f"second signal: stopped {took_s:.1f}s after the first")
    # Then that stop came at once, still with exit 0
    assert "(stopped at once)" in (tmp_path / "run-again.err").read_text()
    assert took_s <= STOP_MARGIN_S
    done += second

    # When a last run finishes the work (and a few more messages)
    scenario.finish(tmp_path / "run-last.log", done, 30)
    # Then nothing was lost, nothing dead-lettered
    counts = scenario.deliveries()
    assert counts.keys() == scenario.ids(done + 30)
    assert not scenario.watcher.dead_letters()
    # And nobody was asked twice about a message of a drained stop (the second signal may ask
    # again about what it cut)
    twice = sorted(i for i in scenario.ids(drained) if counts[i] > 1)
    again = sum(n - 1 for n in counts.values())
    print(f"drain: {drained} messages, {len(twice)} asked twice; second signal: {again} again")
    assert not twice
