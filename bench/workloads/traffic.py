"""Steady traffic through one pushing system (siding or a peer) into the benchmark's receiver.

Every system gets the same sequence: a fresh topic with one warm-up message, the system started
and seen to deliver it, then ``count`` messages produced at ``rate``; then the wait until the
receiver got every one, the system settled (siding: the group committed them all), and the
receiver stayed quiet for ``QUIET_S`` so late redeliveries are counted too.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.peers import benthos, share_group
from bench.peers import parallel_consumer as pc
from bench.peers.common import PeerProcess
from bench.workloads.context import BenchContext, Transport
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import Behaviour, Received, SimConsumerProcess, read_records
from siding.devkit.sim_produce import new_producer, produce
from siding.devkit.wait import WaitTimeout
from siding.model import delivery_id

QUIET_S = 3.0
READY_TIMEOUT_S = 180.0
POLL_S = 0.25


class Running(Protocol):
    def check(self) -> None:
        """Raise if the system stopped with an error."""

    def ready(self, timeout_s: float) -> None:
        """Block until the system is steady after the warm-up message."""

    def settle(self, total: int, timeout_s: float) -> None:
        """Block until the system is done with all ``total`` messages (they were received)."""

    def process_root(self) -> int:
        """The root of the system's own process tree (for its CPU)."""


class System(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def transport(self) -> Transport: ...

    def start(
        self, ctx: BenchContext, topic: str, sim: SimConsumerProcess, total: int
    ) -> AbstractContextManager[Running]: ...


@dataclass(frozen=True, slots=True)
class Pushed:
    topic: str
    records: list[Received]
    expected: set[str]
    complete: bool
    seconds: float  # from the first message produced until all were received (and settled)
    produce_seconds: float  # producing them all (longer than count / rate if it fell behind)


class RecordTail:
    """Reads a record file as it grows: each ``poll`` parses only the new complete lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.ids: set[str] = set()

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for row in csv.reader(io.StringIO(complete.decode())):
            self.ids.add(row[0])

    def size(self) -> int:
        return os.stat(self.path).st_size if self.path.exists() else 0


def wait_received(
    tail: RecordTail, ids: set[str], timeout_s: float, check: Callable[[], None]
) -> bool:
    """Until every id in ``ids`` was received; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        check()
        tail.poll()
        if ids <= tail.ids:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def wait_quiet(tail: RecordTail, quiet_s: float, timeout_s: float) -> None:
    """Until the record file has not grown for ``quiet_s`` (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    size, since = tail.size(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(POLL_S)
        now = tail.size()
        if now != size:
            size, since = now, time.monotonic()


def start_producer(
    ctx: BenchContext,
    topic: str,
    count: int,
    rate: float,
    producer: Any = None,
    *,
    keys: int | None = None,
) -> threading.Thread:
    """Produce ``count`` messages at ``rate`` on a thread; reuse ``producer`` when given (one that
    sent the warm-up message is already connected, so the first messages do not wait for that)."""
    thread = threading.Thread(
        target=produce,
        args=(ctx.bootstrap, topic, count),
        kwargs={"rate": rate, "start_seq": 1, "producer": producer, "keys": keys},
        daemon=True,
    )
    thread.start()
    return thread


def traffic_ids(topic: str, count: int) -> set[str]:
    """The measured messages' ids: offsets 1..count (offset 0 is the warm-up)."""
    return {delivery_id(topic, 0, offset) for offset in range(1, count + 1)}


def push(
    ctx: BenchContext,
    system: System,
    *,
    label: str,
    behaviour: Behaviour,
    count: int,
    rate: float,
    done_timeout_s: float,
    keys: int | None = None,
) -> Pushed:
    topic = ctx.topic(label)
    producer = new_producer(ctx.bootstrap)
    produce(ctx.bootstrap, topic, 1, producer=producer)  # the warm-up, left out of the numbers
    record = ctx.record_file(topic)
    tail = RecordTail(record)
    expected = traffic_ids(topic, count)
    with (
        ctx.sim(behaviour, record, transport=system.transport) as sim,
        system.start(ctx, topic, sim, count + 1) as running,
    ):
        warm = {delivery_id(topic, 0, 0)}
        if not wait_received(tail, warm, READY_TIMEOUT_S, running.check):
            raise WaitTimeout(f"{system.name} delivered no warm-up in {READY_TIMEOUT_S:g}s")
        running.ready(READY_TIMEOUT_S)
        started = time.monotonic()
        start_producer(ctx, topic, count, rate, producer, keys=keys).join()
        produce_seconds = time.monotonic() - started
        complete = wait_received(tail, expected, done_timeout_s, running.check)
        if complete:
            running.settle(count + 1, done_timeout_s)
        seconds = time.monotonic() - started
        wait_quiet(tail, QUIET_S, timeout_s=60.0)
    return Pushed(topic, read_records(record), expected, complete, seconds, produce_seconds)


# --- the systems ---------------------------------------------------------------------------


@dataclass
class _SidingRunning:
    run: PipelineRun

    def check(self) -> None:
        self.run.check()

    def ready(self, timeout_s: float) -> None:
        self.run.wait_committed({0: 1}, timeout_s=timeout_s)

    def settle(self, total: int, timeout_s: float) -> None:
        self.run.wait_committed({0: total}, timeout_s=timeout_s)

    def process_root(self) -> int:
        return os.getpid()  # this process is siding's driver; Spark's JVM is its child


@dataclass(frozen=True)
class Siding:
    """siding's real pipeline; ``route=None`` is a route with the defaults."""

    name: str
    transport: Transport
    route: Mapping[str, object] | None = None

    @contextlib.contextmanager
    def start(
        self,
        ctx: BenchContext,
        topic: str,
        sim: SimConsumerProcess,
        total: int,  # noqa: ARG002 (siding needs no count)
    ) -> Iterator[Running]:
        with ctx.route_run(topic, sim.target, self.route, self.transport) as run:
            yield _SidingRunning(run)


@dataclass
class _PeerRunning:
    proc: PeerProcess
    exits: bool
    ready_line: str | None = None  # the key of the JSON line the peer prints once it is steady

    def check(self) -> None:
        self.proc.check()

    def ready(self, timeout_s: float) -> None:
        if self.ready_line is not None:
            self.proc.wait_for_line(self.ready_line, timeout_s)

    def settle(self, total: int, timeout_s: float) -> None:  # noqa: ARG002 (the peer counts)
        if self.exits:
            self.proc.wait(timeout_s)
            self.proc.check()

    def process_root(self) -> int:
        pid = self.proc.pid
        if pid is None:
            raise RuntimeError(f"{self.proc.label} is not running")
        return pid


@dataclass(frozen=True)
class Benthos:
    """Redpanda Connect's engine: ``kafka_franz`` -> ``http_client``, ``in_flight`` at once."""

    binary: Path
    in_flight: int
    name: str = "benthos"
    transport: Transport = "http"

    @contextlib.contextmanager
    def start(
        self,
        ctx: BenchContext,
        topic: str,
        sim: SimConsumerProcess,
        total: int,  # noqa: ARG002 (Benthos runs until stopped)
    ) -> Iterator[Running]:
        group = f"benthos-{topic}"
        settings = benthos.config(ctx.bootstrap, topic, group, sim.url, in_flight=self.in_flight)
        with benthos.process(self.binary, settings, ctx.workdir) as proc:
            yield _PeerRunning(proc, exits=False)


@dataclass(frozen=True)
class ParallelConsumerVertx:
    """Parallel Consumer over the network (Vert.x, unordered), ``concurrency`` at once."""

    classpath: str
    concurrency: int
    timeout_s: float = 600.0
    name: str = "parallel_consumer_vertx"
    transport: Transport = "http"

    @contextlib.contextmanager
    def start(
        self, ctx: BenchContext, topic: str, sim: SimConsumerProcess, total: int
    ) -> Iterator[Running]:
        proc = pc.vertx_process(
            self.classpath,
            ctx.bootstrap,
            topic,
            sim.url,
            ctx.workdir,
            concurrency=self.concurrency,
            count=total,
            timeout_s=self.timeout_s,
        )
        with proc:
            yield _PeerRunning(proc, exits=True)


@dataclass(frozen=True)
class ParallelConsumerRetry:
    """Parallel Consumer with its own retries (``RetryMain``): blocking HTTP calls, a non-2xx
    answer retried after ``retry_delay_s``, in ``mode`` order."""

    classpath: str
    concurrency: int
    retry_delay_s: float
    mode: str = "KEY"
    timeout_s: float = 600.0
    name: str = "parallel_consumer_key"
    transport: Transport = "http"

    @contextlib.contextmanager
    def start(
        self, ctx: BenchContext, topic: str, sim: SimConsumerProcess, total: int
    ) -> Iterator[Running]:
        proc = pc.retry_process(
            self.classpath,
            ctx.bootstrap,
            topic,
            sim.url,
            ctx.workdir,
            mode=self.mode,
            concurrency=self.concurrency,
            count=total,
            retry_delay_s=self.retry_delay_s,
            timeout_s=self.timeout_s,
        )
        with proc:
            yield _PeerRunning(proc, exits=True)


@dataclass(frozen=True)
class ShareGroup:
    """Kafka's share groups: ``tuning.consumers`` ``KafkaShareConsumer``s in one new share group,
    each pushing its polls over HTTP and acknowledging every record (ACCEPT / RELEASE)."""

    classpath: str
    tuning: share_group.Tuning
    name: str = "share_group"
    transport: Transport = "http"

    @contextlib.contextmanager
    def start(
        self,
        ctx: BenchContext,
        topic: str,
        sim: SimConsumerProcess,
        total: int,  # noqa: ARG002 (the share group runs until stopped)
    ) -> Iterator[Running]:
        group = f"share-{topic}"
        proc = share_group.process(
            self.classpath,
            ctx.bootstrap,
            topic=topic,
            group=group,
            url=sim.url,
            workdir=ctx.workdir,
            tuning=self.tuning,
        )
        with proc:
            # every consumer assigned: the traffic does not wait for the group to fill up
            yield _PeerRunning(proc, exits=False, ready_line="ready")
