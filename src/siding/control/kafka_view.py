"""What the console shows from Kafka itself: per-partition lag of each route's group, each
lane's backlog and next due time, the DLQ's size and its latest letters.

The driver polls on its own thread (``KafkaView``) every few seconds, so ``/status`` answers
from memory and the page stays fast whatever the partition count. The decisions (lag of a
partition, a lane's backlog and next due time, what a letter shows) are pure functions below.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from siding import naming
from siding.config import DEFAULT_CLUSTER, RouteConfig, cluster_name
from siding.pipeline.executor.live import LiveReport, decode_report, in_flight_now
from siding.routing import story

log = logging.getLogger(__name__)

POLL_S = 5.0
# The workers' in-flight reports are read this often (they write about once a second).
LIVE_S = 1.0
LATEST_LETTERS = 10
# Beyond this many partitions with a backlog, a lane's next due time is read from the first
# ones only: one record read per partition per poll.
MAX_DUE_READS = 32
_KEY_CHARS = 40
READ_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a topic a route's group reads: log end, committed position, lag."""

    topic: str
    partition: int
    end: int
    committed: int | None
    lag: int


@dataclass(frozen=True, slots=True)
class LaneBacklog:
    """Records waiting in a lane's topic, and when the first of them falls due."""

    label: str
    topic: str
    backlog: int
    next_due_ms: int | None


@dataclass(frozen=True, slots=True)
class LetterSummary:
    """One dead letter as the console lists it."""

    id: str
    reason: str
    key: str | None
    timestamp_ms: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class RouteKafka:
    """One poll's facts about one route."""

    partitions: tuple[PartitionLag, ...] = ()
    lanes: tuple[LaneBacklog, ...] = ()
    dlq_topic: str = ""
    dlq_size: int = 0
    letters: tuple[LetterSummary, ...] = ()
    polled_at_ms: int = 0
    # Records per second arriving at the source topic, between the last two polls.
    offered_per_s: float | None = None
    error: str | None = None
    # Calls open at the consumers now, by lane label (siding.pipeline.executor.live), and when read.
    in_flight: tuple[tuple[str, int], ...] = ()
    in_flight_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class RouteTopics:
    """Which topics of a route the console watches, and the group that commits them."""

    route: str
    group: str
    sources: tuple[str, ...]  # the source topics named (empty for a pattern)
    lanes: tuple[tuple[str, str], ...]  # (label, topic): retry lanes, then the park lane
    dlq: str
    pattern: str | None = None  # topic_pattern: its matching topics are looked up each poll
    live: str = ""  # the workers' in-flight reports
    # The Kafka clusters of the sources and of the lanes, DLQ and live topic (cluster_name).
    cluster: str = DEFAULT_CLUSTER
    write_cluster: str = DEFAULT_CLUSTER
    # A pinned route's partitions by source topic (route.partitions); empty: every partition.
    pins: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def source_topics(self, existing: Iterable[str]) -> tuple[str, ...]:
        """Pure: the source topics to poll, given the names of the topics that exist."""
        if self.pattern is None:
            return self.sources
        return tuple(sorted(t for t in existing if re.fullmatch(self.pattern, t)))

    def reads(self, topic: str, partition: int) -> bool:
        """Pure: whether the route reads ``partition`` of its source ``topic``."""
        pinned = dict(self.pins).get(topic)
        return pinned is None or partition in pinned


def route_topics(route: RouteConfig) -> RouteTopics:
    """Pure: the topics of ``route`` (every lane commits the route's group)."""
    owned = naming.topics_of(route)
    lanes = tuple((t.label, t.name) for t in (*owned.lanes, owned.park))
    return RouteTopics(
        route.name,
        route.group,
        route.source_topics,
        lanes,
        owned.dlq.name,
        route.topic_pattern,
        owned.state(naming.LIVE).name,
        cluster_name(route, "source"),
        cluster_name(route, "write"),
        tuple(route.pins.items()),
    )


def in_flight_by_label(reports: Iterable[LiveReport], now_ms: int) -> tuple[tuple[str, int], ...]:
    """Pure: the calls open now, by lane label in lane order (main, retry lanes; the park
    lane's own calls count under the lane of the record they deliver)."""
    return tuple(
        (naming.lane_label(k), n) for k, n in sorted(in_flight_now(reports, now_ms).items())
    )


def partition_lag(
    topic: str, partition: int, low: int, end: int, committed: int | None
) -> PartitionLag:
    """Pure: the lag of one partition. With nothing committed yet, everything still in the
    log counts; a committed position beyond the end (a truncated log) counts as none."""
    start = low if committed is None else max(committed, low)
    return PartitionLag(topic, partition, end, committed, max(0, end - start))


def lane_backlog(
    label: str, topic: str, lags: Iterable[PartitionLag], due_ms: Iterable[int | None]
) -> LaneBacklog:
    """Pure: a lane's backlog is the lag of its topic; it falls due at the earliest due time
    of the first waiting record of each partition (a retry lane's records are in due order
    per partition, so the first one is the next)."""
    dues = [d for d in due_ms if d is not None]
    return LaneBacklog(label, topic, sum(p.lag for p in lags), min(dues) if dues else None)


def printable_key(key: bytes | None) -> str | None:
    """Pure: a record key as the page shows it: text when it is printable UTF-8 (shortened),
    else ``base64:`` and its base64."""
    if key is None:
        return None
    try:
        text = key.decode()
    except UnicodeDecodeError:
        text = ""
    else:
        if text.isprintable():
            return text if len(text) <= _KEY_CHARS else text[: _KEY_CHARS - 1] + "…"
    encoded = base64.b64encode(key).decode()
    return "base64:" + (encoded if len(encoded) <= _KEY_CHARS else encoded[: _KEY_CHARS - 1] + "…")


def letter_summary(
    partition: int,
    offset: int,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    timestamp_ms: int,
) -> LetterSummary:
    """Pure: what the console shows of one DLQ record (its story names the original record)."""
    told = story.decode(headers)
    if told is None:
        return LetterSummary(
            f"(no story) {partition}/{offset}",
            "",
            printable_key(key),
            timestamp_ms,
            partition,
            offset,
        )
    died = told.died_at_ms if told.died_at_ms is not None else timestamp_ms
    return LetterSummary(
        told.origin.delivery_id, told.reason, printable_key(key), died, partition, offset
    )


def due_of(headers: Sequence[tuple[str, bytes | None]]) -> int | None:
    """Pure: the due time (epoch ms) a lane record carries; ``None`` without a story."""
    told = story.decode(headers)
    return told.not_before_ms if told is not None else None


def offered_rate(before: RouteKafka | None, after: RouteKafka) -> float | None:
    """Pure: records per second produced to the source between two polls (``None`` before
    the second poll, or when partitions came or went)."""
    if before is None or before.polled_at_ms >= after.polled_at_ms:
        return None
    old = {(p.topic, p.partition): p.end for p in before.partitions}
    new = {(p.topic, p.partition): p.end for p in after.partitions}
    if not new or old.keys() != new.keys():
        return None
    seconds = (after.polled_at_ms - before.polled_at_ms) / 1000
    return max(0, sum(new.values()) - sum(old.values())) / seconds


def latest_first(
    letters: Iterable[LetterSummary], n: int = LATEST_LETTERS
) -> tuple[LetterSummary, ...]:
    """Pure: the ``n`` newest letters, newest first."""
    return tuple(sorted(letters, key=lambda x: (x.timestamp_ms, x.offset), reverse=True)[:n])


# -- I/O ---------------------------------------------------------------------------------------


@dataclass
class _Clients:
    group: Any  # a Consumer with the route's group id: committed offsets, watermarks
    reader: Any  # a Consumer with a throw-away group id: reads single records, never commits
    # The group's Consumer on the cluster of the lanes, when that is not the source's.
    lane_group: Any = None

    @property
    def lanes(self) -> Any:
        return self.group if self.lane_group is None else self.lane_group


@dataclass
class KafkaView:
    """Polls Kafka every ``interval_s`` on a daemon thread; ``facts(route)`` is the latest."""

    client_conf: Mapping[str, object]
    routes: Sequence[RouteTopics]
    # Settings of the clusters other than [kafka] (``[kafka.clusters.<name>]``), by name.
    clusters: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    interval_s: float = POLL_S
    clock: Callable[[], float] = time.time
    _facts: dict[str, RouteKafka] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _live_thread: threading.Thread | None = None
    _clients: dict[str, _Clients] = field(default_factory=dict)
    _live: dict[str, _LiveReports] = field(default_factory=dict)

    def facts(self, route: str) -> RouteKafka | None:
        with self._lock:
            return self._facts.get(route)

    def watch(self, routes: Sequence[RouteTopics]) -> None:
        """Poll these routes from now on (routes made or deleted at runtime)."""
        names = {topics.route for topics in routes}
        with self._lock:
            self.routes = list(routes)
            for gone in set(self._facts) - names:
                del self._facts[gone]

    def start(self) -> KafkaView:
        self._thread = threading.Thread(target=self._run, name="siding-kafka-view", daemon=True)
        self._thread.start()
        self._live_thread = threading.Thread(
            target=self._run_live, name="siding-kafka-view-live", daemon=True
        )
        self._live_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._live_thread):
            if thread is not None:
                thread.join(10)
        self._thread = self._live_thread = None
        for clients in self._clients.values():
            for consumer in (clients.group, clients.reader, clients.lane_group):
                if consumer is None:
                    continue
                with contextlib.suppress(Exception):  # closing on the way out
                    consumer.close()
        self._clients.clear()
        for follower in self._live.values():
            follower.close()
        self._live.clear()

    def poll_once(self) -> None:
        """One poll of every route (the thread calls this; tests may too)."""
        for topics in self.routes:
            try:
                facts = self._poll(topics)
            except Exception as exc:  # Kafka away: keep the last facts, say why
                log.debug("kafka view: %s: %s", topics.route, exc)
                with self._lock:
                    old = self._facts.get(topics.route, RouteKafka())
                    self._facts[topics.route] = _with_error(old, str(exc))
            else:
                with self._lock:  # the live thread writes its part of the facts too
                    before = self._facts.get(topics.route)
                    facts = replace(facts, offered_per_s=offered_rate(before, facts))
                    if before is not None:  # what the live reads found stays
                        facts = replace(
                            facts,
                            in_flight=before.in_flight,
                            in_flight_at_ms=before.in_flight_at_ms,
                        )
                    self._facts[topics.route] = facts

    def poll_live(self) -> None:
        """Read the workers' newest in-flight reports of every route (cheap: one small topic)."""
        now_ms = int(self.clock() * 1000)
        routes = list(self.routes)
        for gone in set(self._live) - {topics.route for topics in routes}:
            self._live.pop(gone).close()  # a route deleted at runtime
        for topics in routes:
            if not topics.live:
                continue
            follower = self._live.get(topics.route)
            try:
                if follower is None or follower.topic != topics.live:
                    follower = self._live[topics.route] = _LiveReports(
                        self.conf_of(topics.write_cluster), topics.live
                    )
                follower.read()
            except Exception as exc:  # not created yet, or Kafka away: the last reports stand
                log.debug("kafka view: %s in flight: %s", topics.route, exc)
                if follower is None:
                    continue
            with self._lock:
                old = self._facts.get(topics.route, RouteKafka())
                self._facts[topics.route] = replace(
                    old,
                    in_flight=in_flight_by_label(follower.reports.values(), now_ms),
                    in_flight_at_ms=now_ms,
                )

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    def _run_live(self) -> None:
        # Its own thread: a slow poll of lag and letters must not hold the live count back.
        while not self._stop.is_set():
            self.poll_live()
            self._stop.wait(LIVE_S)

    def conf_of(self, cluster: str) -> Mapping[str, object]:
        return self.client_conf if cluster == DEFAULT_CLUSTER else self.clusters[cluster]

    def _consumers(self, topics: RouteTopics) -> _Clients:
        from confluent_kafka import Consumer

        clients = self._clients.get(topics.route)
        if clients is None:
            source = {**self.conf_of(topics.cluster), "enable.auto.commit": False}
            common = {**self.conf_of(topics.write_cluster), "enable.auto.commit": False}
            split = topics.write_cluster != topics.cluster
            clients = _Clients(
                group=Consumer({**source, "group.id": topics.group}),
                reader=Consumer({**common, "group.id": f"siding-console-{uuid.uuid4().hex}"}),
                lane_group=Consumer({**common, "group.id": topics.group}) if split else None,
            )
            self._clients[topics.route] = clients
        return clients

    def _poll(self, topics: RouteTopics) -> RouteKafka:
        clients = self._consumers(topics)
        existing: Iterable[str] = ()
        if topics.pattern is not None:
            existing = clients.group.list_topics(timeout=5).topics
        partitions = [
            lag
            for source in topics.source_topics(existing)
            for lag in self._lags(clients.group, source)
            if topics.reads(source, lag.partition)
        ]
        lanes = []
        for label, topic in topics.lanes:
            lags = self._lags(clients.lanes, topic)
            waiting = [p for p in lags if p.lag > 0][:MAX_DUE_READS]
            dues = [self._due(clients.reader, p) for p in waiting]
            lanes.append(lane_backlog(label, topic, lags, dues))
        size, letters = self._dlq(clients.reader, topics.dlq)
        return RouteKafka(
            partitions=tuple(partitions),
            lanes=tuple(lanes),
            dlq_topic=topics.dlq,
            dlq_size=size,
            letters=letters,
            polled_at_ms=int(self.clock() * 1000),
        )

    def _lags(self, consumer: Any, topic: str) -> list[PartitionLag]:
        from confluent_kafka import TopicPartition

        found = consumer.list_topics(topic, timeout=5).topics.get(topic)
        if found is None or found.error is not None:
            return []
        parts = sorted(int(p) for p in found.partitions)
        committed = {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in consumer.committed([TopicPartition(topic, p) for p in parts], timeout=5)
        }
        rows = []
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            rows.append(partition_lag(topic, p, int(low), int(high), committed.get(p)))
        return rows

    def _due(self, reader: Any, lag: PartitionLag) -> int | None:
        record = _read_one(reader, lag.topic, lag.partition, lag.end - lag.lag)
        return None if record is None else due_of(record.headers() or ())

    def _dlq(self, reader: Any, topic: str) -> tuple[int, tuple[LetterSummary, ...]]:
        from confluent_kafka import TopicPartition

        found = reader.list_topics(topic, timeout=5).topics.get(topic)
        if found is None or found.error is not None:
            return 0, ()
        size, letters = 0, list[LetterSummary]()
        for p in sorted(int(p) for p in found.partitions):
            low, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            size += int(high) - int(low)
            start = max(int(low), int(high) - LATEST_LETTERS)
            letters.extend(
                letter_summary(p, r.offset(), r.key(), r.headers() or (), r.timestamp()[1])
                for r in _read_range(reader, topic, p, start, int(high))
            )
        return size, latest_first(letters)


class _LiveReports:
    """The newest report of each worker process, from a route's ``live`` topic."""

    def __init__(self, client_conf: Mapping[str, object], topic: str) -> None:
        from siding.kafka.tail import TopicTail

        self.topic = topic
        self._tail = TopicTail(client_conf, topic)
        self.reports: dict[str, LiveReport] = {}

    def read(self) -> None:
        for key, value in self._tail.read_new(READ_TIMEOUT_S):
            report = decode_report(key, value)
            if report is not None:
                self.reports[report.worker] = report

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing on the way out
            self._tail.close()


def _read_one(reader: Any, topic: str, partition: int, offset: int) -> Any:
    """The record at ``offset`` (or the next one after a gap), or ``None``."""
    records = _read_range(reader, topic, partition, offset, offset + 1)
    return records[0] if records else None


def _read_range(reader: Any, topic: str, partition: int, start: int, end: int) -> list[Any]:
    """The records from ``start`` up to (not including) ``end``, as many as arrive in time."""
    from confluent_kafka import TopicPartition

    if start >= end:
        return []
    reader.assign([TopicPartition(topic, partition, start)])
    out: list[Any] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    while time.monotonic() < deadline:
        message = reader.poll(0.2)
        if message is None or message.error() is not None:
            continue
        out.append(message)
        if message.offset() >= end - 1:
            break
    return out


def _with_error(facts: RouteKafka, error: str) -> RouteKafka:
    return replace(facts, error=error)
