"""The Spark application: per route, one streaming query for the main lane and one per lane."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siding import naming
from siding.config import RouteConfig, SidingConfig
from siding.kafka.admin import (
    admin_client,
    cluster_id,
    commit_offsets,
    committed_offsets,
)
from siding.kafka.reader import read_to_end
from siding.kafka.tail import TopicTail
from siding.pipeline.driver import topics
from siding.pipeline.driver.batch import BatchSink, LaneBatchHandler
from siding.pipeline.driver.commits import CommitTarget, make_listener
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.drain import Drain, fields, quiet_py4j, summary
from siding.pipeline.driver.keystate import KeyParking
from siding.pipeline.driver.park_batch import ParkBatchHandler
from siding.pipeline.driver.progress_store import ProgressStore
from siding.pipeline.driver.session import build_session, effective_master, task_slots
from siding.pipeline.driver.settlements import SettlementStore
from siding.pipeline.driver.source import (
    end_offsets,
    main_subscription,
    source_options,
    starting_offsets,
    starting_offsets_of,
)
from siding.pipeline.driver.topics import RouteFailed
from siding.pipeline.offline import moves, owner, positions
from siding.pipeline.offline.route_lock import RouteLock
from siding.routing.producer import DurableProducer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

# Retry and park lanes hold records for seconds at least: polling them faster buys nothing.
SIDE_LANE_TRIGGER_S = 0.5


@dataclass
class Application:
    """Owns the SparkSession and every query; ``run`` blocks until ``stop`` or a failure."""

    config: SidingConfig
    sink: BatchSink = field(default_factory=BatchSink)
    on_progress: Callable[[str, Any], None] = lambda *_: None
    stop_event: threading.Event = field(default_factory=threading.Event)
    queries: list[StreamingQuery] = field(default_factory=list)
    spark: SparkSession | None = None
    _own_session: bool = False
    _listener: Any = None
    _producers: list[DurableProducer] = field(default_factory=list)
    _tails: list[TopicTail] = field(default_factory=list)
    _present: set[str] = field(default_factory=set)
    # Partitions of every topic seen at start (source topics, lanes): startingOffsets names them.
    _partitions: dict[str, int] = field(default_factory=dict)
    # Each route's source topics found at start (a pattern's may grow while it runs).
    _sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _locks: list[RouteLock] = field(default_factory=list)
    controls: RouteControls = field(default_factory=RouteControls)
    drain: Drain = field(default_factory=Drain)
    _stores: dict[str, SettlementStore] = field(default_factory=dict)
    # Routes started or stopped at runtime (add_route, remove_route): what each one holds.
    _admin: Any = None
    _targets: dict[str, CommitTarget] = field(default_factory=dict)
    _held: dict[str, list[Any]] = field(default_factory=dict)
    _routes_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.controls = RouteControls(
            {route.name: route for route in self.config.route}, self.config.control.registry_topic
        )
        timeouts = {route.name: route.drain_timeout_s for route in self.config.route}
        self.drain = Drain(timeouts, hard=self.stop_event)

    def start(self) -> None:
        """Create topics, restore state and start every query. A SparkSession passed in as
        ``spark`` is used (and left running on ``stop``); otherwise one is built from the config."""
        try:
            self._start()
        except BaseException:
            self._release_locks()  # a failed start holds no route (``stop`` may never come)
            raise

    def _start(self) -> None:
        config = self.config
        client_conf = config.kafka.client_config()
        admin = admin_client({k: str(v) for k, v in client_conf.items()})
        to_claim = self._check_owners(admin)
        self._lock_routes()
        partitions_of = {r.name: self._prepare_topics(admin, r) for r in config.route}
        for route_dir, current in to_claim:
            owner.claim(route_dir, current)
        for route in config.route:
            moves.reconcile_at_start(config, route, admin)
        if self.spark is None:
            slots = sum(task_slots(r, partitions_of[r.name]) for r in config.route)
            self.spark = build_session(
                effective_master(config.spark.master, slots, os.cpu_count() or 1),
                app_name=config.spark.app_name,
                extra=config.spark.conf_values(),
                jars_dir=config.spark.jars_dir,
            )
            self._own_session = True
        quiet_py4j()
        self.drain.open_signal()
        self._admin = admin
        targets = self._targets  # filled below; the listener reads it live
        self._listener = make_listener(admin, targets, self.on_progress, self.drain.progressed)
        self.spark.streams.addListener(self._listener)
        for route in config.route:
            self._start_route(route, partitions_of[route.name])

    def _start_route(self, route: RouteConfig, partitions: int) -> None:
        """Restore the route's state and start its queries (main lane, retry lanes, park lane)."""
        config, targets = self.config, self._targets
        client_conf = config.kafka.client_config()
        assert self.spark is not None
        parking = KeyParking(naming.state_topic(route.name, "keys"))
        parking.restore(read_to_end(client_conf, parking.topic))
        state_producer = DurableProducer(client_conf)
        self._producers.append(state_producer)
        self._held.setdefault(route.name, []).append(state_producer)
        sources = self._sources[route.name]
        held = self._held_topics(route)
        progress = self._progress_store(route)
        lanes = (sources, *((t,) for t in naming.route_lane_topics(route)))
        for lane, read in enumerate(lanes):
            name = naming.query_name(route.name, lane)
            if lane > 0:
                targets[name] = CommitTarget(route.group, read[0])
            elif route.topic_pattern is None:
                targets[name] = CommitTarget(route.group, read[0], (*read[1:], *held))
            else:  # the topics matching the pattern, as they appear
                targets[name] = CommitTarget(route.group, "", held, route.topic_pattern)
            handler = LaneBatchHandler(
                route=route,
                lane=lane,
                client_conf=client_conf,
                parking=parking,
                state_producer=state_producer,
                stop=self.stop_event,
                sink=self.sink,
                parallelism=self.spark.sparkContext.defaultParallelism,
                controls=self.controls,
                drain=self.drain,
                progress=progress,
            )
            checkpoint = Path(config.spark.checkpoint_dir) / naming.checkpoint_subdir(
                route.name, lane
            )
            starting = self._starting(
                client_conf,
                route,
                (*read, *held) if lane == 0 else read,
                partitions=partitions,
                checkpoint=checkpoint,
                lane=lane,
            )
            subscribe, topic = (
                main_subscription(route, held) if lane == 0 else ("subscribe", read[0])
            )
            self._start_query(
                route,
                name,
                topic,
                handler=handler,
                checkpoint=checkpoint,
                starting=starting,
                subscribe=subscribe,
            )
        # Parked records left from when the route parked are finished even if it no longer
        # does (parking turned off, key mode): the main lane committed past them.
        if route.parks or naming.park_topic(route.name) in self._present:
            targets[naming.query_name(route.name, naming.PARK_LANE)] = CommitTarget(
                route.group, naming.park_topic(route.name)
            )
            self._start_park_lane(route, partitions, state_producer)

    def _progress_store(self, route: RouteConfig) -> ProgressStore | None:
        """What earlier attempts of the route's batches made durable (docs/replay.md)."""
        if route.progress_interval <= 0:
            return None
        tail = TopicTail(
            self.config.kafka.client_config(), naming.state_topic(route.name, "progress")
        )
        self._tails.append(tail)
        self._held.setdefault(route.name, []).append(tail)
        store = ProgressStore(tail.topic, tail.read_new)
        store.catch_up()
        return store

    def _start_park_lane(
        self, route: RouteConfig, partitions: int, state_producer: DurableProducer
    ) -> None:
        client_conf = self.config.kafka.client_config()
        tail = TopicTail(client_conf, naming.state_topic(route.name, "settled"))
        self._tails.append(tail)
        self._held.setdefault(route.name, []).append(tail)
        store = SettlementStore(tail.topic, tail.read_new, state_producer.write)
        store.catch_up()
        self._stores[route.name] = store
        assert self.spark is not None
        handler = ParkBatchHandler(
            route=route,
            client_conf=client_conf,
            settlements=store,
            stop=self.stop_event,
            sink=self.sink,
            parallelism=self.spark.sparkContext.defaultParallelism,
            controls=self.controls,
            drain=self.drain,
        )
        topic = naming.park_topic(route.name)
        checkpoint = Path(self.config.spark.checkpoint_dir) / naming.checkpoint_subdir(
            route.name, naming.PARK_LANE
        )
        starting = self._starting(
            client_conf, route, (topic,), partitions=partitions, checkpoint=checkpoint, lane=1
        )
        name = naming.query_name(route.name, naming.PARK_LANE)
        self._start_query(
            route, name, topic, handler=handler, checkpoint=checkpoint, starting=starting
        )

    def _check_owners(
        self, admin: Any, routes: tuple[RouteConfig, ...] | None = None
    ) -> list[tuple[Path, owner.Owner]]:
        """Refuse any route whose checkpoint belongs to another cluster, topic or route (before
        Spark sees it); the owners still to be recorded once the route's topics are ready."""
        base = owner.local_dir(self.config.spark.checkpoint_dir)
        if base is None:
            log.info("checkpoint owners are not checked on %s", self.config.spark.checkpoint_dir)
            return []
        cluster = cluster_id(admin)
        to_claim = []
        for route in self.config.route if routes is None else routes:
            route_dir = base / naming.route_checkpoint_subdir(route.name)
            current = owner.Owner(route.name, route.source_label, cluster)
            if owner.check(route_dir, current, naming.lane_label(0)).write:
                to_claim.append((route_dir, current))
        return to_claim

    def _lock_routes(self, routes: tuple[RouteConfig, ...] | None = None) -> None:
        """Hold each route's checkpoint while running: a second siding on it, or an offsets
        reset, is refused (``siding.pipeline.offline.route_lock``)."""
        base = owner.local_dir(self.config.spark.checkpoint_dir)
        if base is None:
            return
        for route in self.config.route if routes is None else routes:
            route_dir = base / naming.route_checkpoint_subdir(route.name)
            what = f"siding run of route {route.name}"
            lock = RouteLock(route_dir, what).acquire(wait_s=2.0)
            self._locks.append(lock)
            self._held.setdefault(route.name, []).append(lock)

    def _release_locks(self) -> None:
        locks, self._locks = self._locks, []
        for lock in locks:
            lock.release()

    def _prepare_topics(self, admin: Any, route: RouteConfig) -> int:
        prepared = topics.prepare(admin, route)
        self._present.update(prepared.present)
        self._partitions.update(prepared.present)
        self._sources[route.name] = prepared.sources
        return prepared.partitions

    def _held_topics(self, route: RouteConfig) -> tuple[str, ...]:
        return topics.held_topics(route, self._present)

    def _starting(
        self,
        client_conf: Mapping[str, object],
        route: RouteConfig,
        topics: tuple[str, ...],
        *,
        partitions: int,
        checkpoint: Path,
        lane: int,
    ) -> str:
        if (checkpoint / "offsets").exists():
            return "earliest"  # ignored by Spark: the checkpoint is the source of truth
        fallback = route.starting_offsets if lane == 0 else "earliest"
        if len(topics) == 1:
            committed = committed_offsets(client_conf, route.group, topics[0])
            return starting_offsets(topics[0], partitions, committed, fallback)
        # The sources from the group or the route's setting; the hold topic from the group or
        # its beginning (what it holds was committed away from the source).
        return starting_offsets_of(
            {
                t: (
                    committed_offsets(client_conf, route.group, t),
                    fallback if route.reads(t) else "earliest",
                )
                for t in topics
            },
            {t: self._partitions.get(t, partitions) for t in topics},
        )

    def _start_query(
        self,
        route: RouteConfig,
        name: str,
        topic: str,
        *,
        handler: LaneBatchHandler | ParkBatchHandler,
        checkpoint: Path,
        starting: str,
        subscribe: str = "subscribe",
    ) -> None:
        assert self.spark is not None
        trigger_s = self.config.spark.trigger
        if name != naming.query_name(route.name, 0):
            trigger_s = max(trigger_s, SIDE_LANE_TRIGGER_S)
        options = source_options(
            self.config.kafka.spark_options(),
            topic,
            starting=starting,
            min_partitions=route.min_partitions,
            max_offsets_per_trigger=route.max_offsets_per_trigger,
            subscribe=subscribe,
        )
        query = (
            self.spark.readStream.format("kafka")
            .options(**options)
            .load()
            .writeStream.queryName(name)
            .foreachBatch(handler)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
            .start()
        )
        self.queries.append(query)
        log.info("started %s on %s", name, topic)

    def add_route(self, route: RouteConfig) -> None:
        """Start a route made at runtime (docs/registration.md), as ``start`` starts one from
        the config: its topics, its checkpoint's owner, its state and its queries."""
        with self._routes_lock:
            if self.spark is None or self._admin is None:
                raise RouteFailed(f"route {route.name}: the application is not running")
            if any(r.name == route.name for r in self.config.route):
                raise RouteFailed(f"route {route.name} is already running")
            to_claim = self._check_owners(self._admin, (route,))
            self._lock_routes((route,))
            try:
                partitions = self._prepare_topics(self._admin, route)
                for route_dir, current in to_claim:
                    owner.claim(route_dir, current)
                config = self.config.model_copy(update={"route": (*self.config.route, route)})
                moves.reconcile_at_start(config, route, self._admin)
            except BaseException:
                self._release(route.name)
                raise
            self.config = config
            self.controls.add(route)
            self.drain.track(route.name, route.drain_timeout_s, _query_names(route))
            self._start_route(route, partitions)

    def remove_route(self, name: str, timeout_s: float) -> dict[str, dict[int, int]]:
        """Stop a route's queries once the batches they are running have committed (each is
        held at the start of its next batch, as a pause holds it), then commit the group's
        offsets; past ``timeout_s`` they are stopped as they are (a batch cut short is not
        committed and runs again if the route comes back). Returns the offsets committed, per
        topic. Lanes, DLQ, state topics and checkpoints stay (docs/registration.md)."""
        with self._routes_lock:
            route = next((r for r in self.config.route if r.name == name), None)
            if route is None:
                raise RouteFailed(f"no route named {name!r} is running")
            names = set(_query_names(route))
            queries = [q for q in self.queries if q.name in names]
            self.controls.pause(name)
            give_up = time.monotonic() + timeout_s
            while not self._settled(name, queries) and time.monotonic() < give_up:
                if self.stop_event.wait(0.1):
                    break
            else:
                if not self._settled(name, queries):
                    log.warning("route %s: stopped with a batch still running", name)
            self.queries = [q for q in self.queries if q.name not in names]
            # A batch held by the pause ends without starting, as a drain's held batch does
            # (its query's stop interrupts it: Spark takes that for the stop, not an error).
            for query_name in names:
                self.drain.stop(query_name)
            self.controls.remove(name)
            committed: dict[str, dict[int, int]] = {}
            for query in queries:
                try:
                    query.stop()
                except Exception as exc:
                    log.warning("stopping %s: %s", query.name, _short(str(exc)))
                committed.update(self._commit_last(query))
            for query_name in names:
                self._targets.pop(query_name, None)
            self.drain.untrack(name, names)
            self._stores.pop(name, None)
            self.config = self.config.model_copy(
                update={"route": tuple(r for r in self.config.route if r.name != name)}
            )
            self._release(name)
            return committed

    def _release(self, name: str) -> None:
        """Close what a route held: its state producer, its settlements' tail, its lock."""
        for held in self._held.pop(name, []):
            if isinstance(held, DurableProducer):
                self._producers.remove(held)
                held.close()
            elif isinstance(held, TopicTail):
                self._tails.remove(held)
                held.close()
            elif isinstance(held, RouteLock):
                self._locks.remove(held)
                held.release()

    def _settled(self, name: str, queries: list[StreamingQuery]) -> bool:
        """Whether every batch of the route that was running has committed (the drain's
        ``quiet``), and no batch is between the pause and its start (each query is between
        batches, or held by the pause)."""
        if not self.drain.quiet(str(q.name) for q in queries):
            return False
        running = 0
        for query in queries:
            try:
                running += bool(query.status["isTriggerActive"])
            except Exception:  # a query that ended has nothing running
                continue
        return running <= self.controls.held(name)

    def _commit_last(self, query: StreamingQuery) -> dict[str, dict[int, int]]:
        """Commit the group's offsets of a stopped query's last committed batch (the listener
        may not have heard of it yet); what was committed, per topic."""
        target = self._targets.get(str(query.name))
        progress = query.lastProgress
        if target is None or progress is None or self._admin is None:
            return {}
        out: dict[str, dict[int, int]] = {}
        for source in progress.sources:
            for topic in target.topics_of(source.endOffset):
                offsets = end_offsets(source.endOffset, topic)
                if offsets:
                    mark = positions.mark(f"batch={progress.batchId}")
                    commit_offsets(self._admin, target.group, topic, offsets, metadata=mark)
                    out[topic] = offsets
        return out

    def request_drain(self) -> None:
        """Begin a draining stop (``run`` returns; then call ``drain_routes`` and ``stop``)."""
        if self.drain.begin():
            log.info("siding: draining (a second signal stops at once)")

    def request_stop(self) -> None:
        """What a signal does: the first begins a drain, the next one stops at once."""
        if self.drain.requested.is_set():
            self.stop_event.set()
        else:
            self.request_drain()

    def run(self, poll_s: float = 0.5) -> None:
        """Block until a drain or a stop is asked (``request_drain``, ``stop_event``) or a query
        fails (``RouteFailed``)."""
        while not self.stop_event.is_set() and not self.drain.requested.wait(poll_s):
            for query in list(self.queries):
                try:
                    active = query.isActive
                    error = None if active else query.exception()
                except Exception as exc:  # the JVM went away (it got the signal too)
                    if self.stop_event.is_set():
                        return
                    raise RouteFailed(f"lost the Spark driver: {exc}") from exc
                if not active and query in self.queries:  # not a route being deleted
                    self.stop_event.set()
                    raise RouteFailed(f"{query.name} stopped: {_short(str(error))}")

    def drain_routes(self, poll_s: float = 0.1) -> None:
        """The drain (docs/operations.md, "Stopping siding"): no batch starts; wait, per route
        and at most its ``drain_timeout``, until the batches running have committed and the
        calls parked in the workers have answered; log what each route's drain did. A second
        signal (``stop_event``) ends the wait at once."""
        self.request_drain()
        pending = {route.name: route for route in self.config.route}
        names = {route.name: _query_names(route) for route in self.config.route}
        while pending and not self.stop_event.is_set():
            for name in list(pending):
                if self._drained(name, names[name]):
                    # Batches still running at the timeout are cut by the stop.
                    busy = self.drain.busy(names[name])
                    self._log_drain(name, busy, hard=False)
                    del pending[name]
            if pending:
                self.stop_event.wait(poll_s)
        for name in pending:
            self._log_drain(name, self.drain.busy(names[name]), hard=True)

    def _log_drain(self, route: str, replayed: int, *, hard: bool) -> None:
        tally = self.drain.finish(route)
        extra = {"siding": fields(route, tally, replayed=replayed, hard=hard)}
        level = logging.WARNING if hard or replayed else logging.INFO
        log.log(level, summary(route, tally, replayed=replayed, hard=hard), extra=extra)

    def _drained(self, route: str, queries: list[str]) -> bool:
        """Whether ``route``'s drain is over; past its deadline it is, whatever is left."""
        if time.monotonic() >= self.drain.deadline(route):
            return True
        if not self.drain.quiet(queries):
            return False
        store = self._stores.get(route)
        if store is not None and self.drain.waiting_calls(route):
            try:
                store.catch_up()
            except Exception as exc:  # the answers stay in Kafka for the next run
                log.warning("drain: route %s: reading answers: %s", route, exc)
            self.drain.settle(route, store.of)
        return not self.drain.waiting_calls(route)

    def stop(self) -> None:
        """Stop every query, then the session. Offsets are committed by Spark only after a batch
        succeeded, so stopping (or losing the JVM) mid-batch never commits past a record; a
        batch held by a drain (or cut by the stop) ends as a stop, with nothing committed."""
        self.drain.requested.set()
        self.stop_event.set()
        spark, self.spark = self.spark, None
        for query in self.queries:
            try:
                self.drain.stop(str(query.name))
                query.stop()
            except Exception as exc:  # the JVM may already be shutting down with us
                log.warning("stopping a query: %s", str(exc).splitlines()[0] if str(exc) else exc)
        try:
            if spark is not None and self._listener is not None:
                spark.streams.removeListener(self._listener)
                self._listener.release()
            if spark is not None and self._own_session:
                spark.stop()
        except Exception as exc:
            log.warning("stopping Spark: %s", str(exc).splitlines()[0] if str(exc) else exc)
        for producer in self._producers:
            producer.close()
        for tail in self._tails:
            tail.close()
        self._release_locks()
        self.drain.close_signal()


def _query_names(route: RouteConfig) -> list[str]:
    """Every query a route may run: its lanes and its park lane."""
    lanes = (naming.PARK_LANE, *range(len(route.lanes) + 1))
    return [naming.query_name(route.name, lane) for lane in lanes]


def _short(text: str) -> str:
    for line in text.splitlines():
        if "BatchFailed" in line or "siding" in line:
            return line.strip()[:800]
    return text.strip().splitlines()[0][:800] if text.strip() else "unknown error"
