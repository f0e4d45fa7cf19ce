"""One running route: everything it takes to run, and how it gives it back."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from siding import naming
from siding.config import Role, RouteConfig, SidingConfig, cluster_name
from siding.errors import DurableWriteError, RouteStopped
from siding.kafka.admin import cluster_id, commit_offsets
from siding.kafka.reader import read_to_end
from siding.kafka.tail import TopicTail
from siding.pipeline.driver import query, topics
from siding.pipeline.driver.batch import BatchSink, LaneBatchHandler
from siding.pipeline.driver.clusters import Admins
from siding.pipeline.driver.commits import CommitTarget
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.drain import Drain, fields, summary
from siding.pipeline.driver.fence import RouteFence, driver_id
from siding.pipeline.driver.keystate import KeyWaits
from siding.pipeline.driver.pager import DlqPager
from siding.pipeline.driver.park_batch import ParkBatchHandler
from siding.pipeline.driver.pin_claims import PinClaims
from siding.pipeline.driver.progress_store import ProgressStore
from siding.pipeline.driver.settlements import SettlementStore
from siding.pipeline.driver.source import end_offsets, main_subscription
from siding.pipeline.driver.stops import RouteStops
from siding.pipeline.driver.warm import kept_warm, warm_workers
from siding.pipeline.executor.fence_gate import FencePlan
from siding.pipeline.offline import moves, owner, positions
from siding.pipeline.offline.checkpoint_root import checkpoint_root, route_place
from siding.pipeline.offline.route_lock import RouteLock
from siding.pipeline.offline.storage import Place
from siding.routing.producer import DurableProducer
from siding.tracing.settings import trace_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

# The lines keep the logger they had when the application wrote them (log filters select by it).
log = logging.getLogger("siding.pipeline.driver.app")


class RouteRuntime:
    """One running route. What it takes, in order, and gives back in reverse:

    ``open()``, before Spark exists (the boot opens every route at once, ``open_routes``):
    refuse a checkpoint owned by another cluster, topic or route; take the checkpoint's lock
    (an unfenced route's: nothing is created while the checkpoint is busy); check the sources
    and create the topics the route writes (``topics.prepare``); then claim it
    (``claim_routes``; a standby starts Spark first and waits here): hold its fence
    (``[fence]``, ``RouteFence``); record the checkpoint's owner; reconcile the group with the
    checkpoint (``moves``).
    ``start(spark)``: restore the key-mode waits (``KeyWaits``); open the state producer;
    tail the progress topic (``ProgressStore``); per lane, its commit target, batch handler
    and query; if the route parks (or did), tail the settlements (``SettlementStore``) and
    start the park lane the same way.
    ``stop()``: stop the queries, drop the commit targets, close the tails, then the state
    producer, release the lock and the fence. It gives back only what was taken (a failed
    ``open`` or ``start`` calls it), and more than once is harmless. The topics, the owner
    file and the group's offsets stay: they outlive a run. ``remove`` is ``stop`` once the
    running batches have committed (``DELETE /routes/<name>``).
    """

    def __init__(
        self,
        route: RouteConfig,
        config: SidingConfig,
        admins: Admins,
        *,
        sink: BatchSink,
        stop: threading.Event,
        controls: RouteControls,
        drain: Drain,
        stops: RouteStops | None = None,
        standby: bool = False,
        driver: str = "",
    ) -> None:
        self.route = route
        self.standby = standby
        self.stops = stops
        self.config = config
        self.tracing = trace_settings(config.tracing, os.environ)
        self.sink = sink
        self.stop_event = stop
        self.controls = controls
        self.drain = drain
        # Every query the route may run (its lanes and its park lane), running or not.
        self.query_names = query_names(route)
        self.partitions = 0  # of its lanes (``open``)
        # Query name -> where its offsets are committed; the listener reads it live.
        self.targets: dict[str, CommitTarget] = {}
        self.queries: list[StreamingQuery] = []
        # How each query is started (again, ``restart``), and how often it was started again.
        self._starts: dict[str, Callable[[], StreamingQuery]] = {}
        self._restarts: dict[str, int] = {}
        self.settlements: SettlementStore | None = None
        self._admins = admins
        # The clusters the route reads and writes to (siding.config.cluster_name).
        self.source_cluster = cluster_name(route, "source")
        self.write_cluster = cluster_name(route, "write")
        self.write_conf = config.kafka.cluster(self.write_cluster).client_config()
        self._claim: owner.Owner | None = None
        self._lock: RouteLock | None = None
        self._prepared: topics.Prepared | None = None
        self._producer: DurableProducer | None = None
        self._tails: list[TopicTail] = []
        self.pager: DlqPager | None = None
        self.fence: RouteFence | None = None
        # Pins claim partitions of the source's group: on the cluster the route reads, where
        # every route of that group (and only those) meets them.
        source_conf = config.kafka.cluster(self.source_cluster).client_config()
        self.pin_claims = PinClaims(source_conf, route, driver or driver_id())
        if config.fenced:
            self.fence = RouteFence(
                self.write_conf, route.name, config.fence, driver, self._fence_lost
            )

    # -- open -----------------------------------------------------------------------------

    def open(self) -> None:
        """Take the route's checkpoint and topics (``stop`` gives them back)."""
        open_routes((self,))

    def _route_dir(self) -> Place:
        return route_place(self.config, self.route.name)

    def _check_owner(self) -> None:
        """Refuse a checkpoint that belongs to another cluster, topic or route (before Spark
        sees it); note the owner to record once the topics are ready."""
        route_dir = self._route_dir()
        source = self._admins.of(self.source_cluster)
        current = owner.Owner(self.route.name, self.route.source_label, cluster_id(source))
        if owner.check(route_dir, current, naming.lane_label(0)).write:
            self._claim = current

    def _take_fence(self) -> None:
        """Hold the route's fence (waiting, as a standby, while another driver holds it)."""
        if self.fence is not None:
            self.fence.acquire(self.stop_event, standby=self.standby)

    def _fence_lost(self, reason: str) -> None:
        if self.stops is not None:
            if self.stops.record(reason):
                log.error("%s", reason)
        else:
            self.stop_event.set()

    def fence_plan(self) -> FencePlan | None:
        return self.fence.plan() if self.fence is not None else None

    def _take_lock(self) -> None:
        """Hold the checkpoint while running: a second siding on it, or an offsets reset, is
        refused (``siding.pipeline.offline.route_lock``; a remote checkpoint takes none). A
        fenced route takes no lock: the fence decides across machines, and a lock held by a
        frozen driver on the same host would keep its standby out."""
        if self.fence is None:
            what = f"siding run of route {self.route.name}"
            self._lock = RouteLock(self._route_dir(), what).acquire(wait_s=2.0)

    def lock_lost(self) -> str | None:
        """Why the checkpoint lock or the fence no longer guards the route, or ``None``."""
        lock, fence = self._lock, self.fence
        lost = lock.lost() if lock is not None else None
        return lost or (fence.lost() if fence is not None else None)

    def _prepare(self) -> None:
        split = self.write_cluster != self.source_cluster
        self._prepared = topics.prepare(
            self._admins.of(self.source_cluster),
            self.route,
            fenced=self.fence is not None,
            write_admin=self._admins.of(self.write_cluster) if split else None,
        )
        self.partitions = self._prepared.partitions

    def _claim_pins(self) -> None:
        """Refuse to overlap the pins of routes running in other siding processes; claim the
        route's own (``pin_claims``; a standby, after it took the fence)."""
        assert self._prepared is not None
        self.pin_claims.open(self._prepared.on_source)

    def _record_owner(self) -> None:
        if self._claim is not None:
            owner.claim(self._route_dir(), self._claim)

    def _reconcile(self) -> None:
        moves.reconcile_at_start(self.config, self.route, self._admins.of(self.source_cluster))

    # -- start ----------------------------------------------------------------------------

    def start(self, spark: SparkSession) -> None:
        """Restore the route's state and start its queries (main lane, retry lanes, park
        lane); ``open`` first. A failure gives back all the route holds."""
        try:
            self._start(spark)
        except BaseException:
            self.stop()
            raise

    def _start(self, spark: SparkSession) -> None:
        assert self._prepared is not None, "open the route first"
        route, client_conf = self.route, self.write_conf
        present = self._prepared.present
        waits = KeyWaits(naming.state_topic(route.name, naming.KEYS))
        waits.restore(read_to_end(client_conf, waits.topic))
        self._producer = state_producer = DurableProducer(client_conf, guard=self.lock_lost)
        self.pager = self._start_pager()
        held = topics.held_topics(route, present)
        progress = self._progress_store()
        sources = self._prepared.sources
        for lane, read in enumerate((sources, *((t,) for t in naming.route_lane_topics(route)))):
            name = naming.query_name(route.name, lane)
            # The main lane's commits go to the cluster it reads, the lanes' to the one they are on.
            cluster = self.source_cluster if lane == 0 else self.write_cluster
            if lane > 0:
                self.targets[name] = CommitTarget(
                    route.group, read[0], refused=self.lock_lost, cluster=cluster
                )
            elif route.topic_pattern is None:
                more = (*read[1:], *held)
                self.targets[name] = CommitTarget(
                    route.group, read[0], more, refused=self.lock_lost, cluster=cluster
                )
            else:  # the topics matching the pattern, as they appear
                self.targets[name] = CommitTarget(
                    route.group,
                    "",
                    held,
                    route.topic_pattern,
                    refused=self.lock_lost,
                    cluster=cluster,
                )
            handler = LaneBatchHandler(
                route=route,
                lane=lane,
                client_conf=client_conf,
                registry_conf=self.config.kafka.client_config(),
                waits=waits,
                state_producer=state_producer,
                stop=self.stop_event,
                sink=self.sink,
                parallelism=spark.sparkContext.defaultParallelism,
                controls=self.controls,
                drain=self.drain,
                progress=progress,
                stops=self.stops,
                lock_lost=self.lock_lost,
                fence=self.fence_plan,
                pager=self.pager,
                on_flood=self._flood_stop,
                tracing=self.tracing,
            )
            subscribe, topic = (
                main_subscription(route, held, self.partitions)
                if lane == 0
                else ("subscribe", read[0])
            )
            reads = (*read, *held) if lane == 0 else read
            self._start_query(spark, lane, topic, reads, handler, subscribe=subscribe)
        # Parked records left from when the route parked are finished even if it no longer
        # does (parking turned off, key mode): the main lane committed past them.
        if route.parks or naming.park_topic(route.name) in present:
            self._start_park_lane(spark, state_producer)

    def _start_pager(self) -> DlqPager | None:
        """The route's DLQ pager ([route.dlq_page]), sending; ``None`` when it has none."""
        page = self.route.dlq_page
        if page is None:
            return None
        dlq = naming.route_dlq(self.route)
        return DlqPager(self.route.name, dlq, page, on_page=self.sink.on_page).start()

    def _progress_store(self) -> ProgressStore | None:
        """What earlier attempts of the route's batches made durable (docs/replay.md)."""
        if self.route.progress_interval <= 0:
            return None
        tail = self._tail(naming.state_topic(self.route.name, naming.PROGRESS))
        store = ProgressStore(tail.topic, tail.read_new)
        store.catch_up()
        return store

    def _start_park_lane(self, spark: SparkSession, state_producer: DurableProducer) -> None:
        route = self.route
        topic = naming.park_topic(route.name)
        name = naming.query_name(route.name, naming.PARK_LANE)
        self.targets[name] = CommitTarget(
            route.group, topic, refused=self.lock_lost, cluster=self.write_cluster
        )
        tail = self._tail(naming.state_topic(route.name, naming.SETTLED))
        store = SettlementStore(tail.topic, tail.read_new, state_producer.write)
        store.catch_up()
        forgotten = store.after_flood()
        if forgotten:
            log.info(
                "route %s: %d DEAD answers of parked calls from before the DLQ-flood stop"
                " forgotten: their records are asked again",
                route.name,
                forgotten,
            )
        self.settlements = store
        handler = ParkBatchHandler(
            route=route,
            client_conf=self.write_conf,
            registry_conf=self.config.kafka.client_config(),
            settlements=store,
            stop=self.stop_event,
            sink=self.sink,
            parallelism=spark.sparkContext.defaultParallelism,
            controls=self.controls,
            drain=self.drain,
            stops=self.stops,
            letter_producer=state_producer,
            lock_lost=self.lock_lost,
            fence=self.fence_plan,
            pager=self.pager,
            on_flood=self._flood_stop,
            tracing=self.tracing,
        )
        # Read like a retry lane: from the group, or the topic's beginning.
        self._start_query(spark, naming.PARK_LANE, topic, (topic,), handler, starting_lane=1)

    def _flood_stop(self) -> None:
        """The DLQ-flood guard stops the route: mark it in the ``settled`` topic, so that the
        DEAD answers its parked calls gave (now, and until the process is gone) are forgotten
        at the next start and their records asked again (docs/dispatch.md)."""
        store = self.settlements
        if store is None:  # the route has never parked: no parked call can answer
            return
        try:
            store.mark_flood()
        except DurableWriteError as exc:
            log.warning("route %s: the DLQ-flood stop was not marked: %s", self.route.name, exc)

    def _tail(self, topic: str) -> TopicTail:
        tail = TopicTail(self.write_conf, topic)
        self._tails.append(tail)
        return tail

    def _start_query(
        self,
        spark: SparkSession,
        lane: int,
        topic: str,
        reads: tuple[str, ...],
        handler: Callable[[Any, int], None],
        *,
        subscribe: str = "subscribe",
        starting_lane: int | None = None,
    ) -> None:
        assert self._prepared is not None
        route = self.route
        subdir = naming.checkpoint_subdir(route.name, lane)
        checkpoint = checkpoint_root(self.config) / subdir
        # The main lane reads the source's cluster; the retry and park lanes the write cluster.
        role: Role = "source" if lane == 0 else "write"
        starting = query.starting(
            self.config.kafka.cluster_for(route, role).client_config(),
            route,
            reads,
            partitions=self.partitions,
            known=self._prepared.on_source if role == "source" else self._prepared.on_write,
            checkpoint=checkpoint,
            lane=lane if starting_lane is None else starting_lane,
        )
        name = naming.query_name(route.name, lane)
        start = partial(
            query.start_query,
            spark,
            self.config,
            route,
            name,
            topic,
            handler=handler,
            checkpoint=checkpoint,
            starting=starting,
            subscribe=subscribe,
            role=role,
        )
        self._starts[name] = start
        self.queries.append(start())

    def restart(self, stopped: StreamingQuery, error: str) -> bool:
        """Start ``stopped`` again from its checkpoint when ``query.restart_after`` says so (a
        driver that lost this route's fence wrote to the checkpoint); whether it did."""
        name = str(stopped.name)
        start, restarts = self._starts.get(name), self._restarts.get(name, 0)
        holds = self.fence is not None and self.lock_lost() is None
        if start is None or not query.restart_after(error, holds_fence=holds, restarts=restarts):
            return False
        self._restarts[name] = restarts + 1
        log.warning(
            "route %s: %s stopped because another driver wrote to its checkpoint (a driver that"
            " lost the route's fence, resuming); started again from the checkpoint (%d of %d)",
            self.route.name,
            name,
            restarts + 1,
            query.MAX_RESTARTS_AFTER_ANOTHER_WRITE,
        )
        self.queries = [each for each in self.queries if each is not stopped]
        self.queries.append(start())
        return True

    # -- stop -----------------------------------------------------------------------------

    def stop_queries(self) -> None:
        """Stop the route's queries: a batch held by a drain (or cut by the stop) ends as a
        stop, with nothing committed."""
        running, self.queries = self.queries, []
        for each in running:
            try:
                self.drain.stop(str(each.name))
                each.stop()
            except Exception as exc:  # the JVM may already be shutting down with us
                log.warning("stopping a query: %s", str(exc).splitlines()[0] if str(exc) else exc)

    def stop(self) -> None:
        """Give back what ``open`` and ``start`` took, last taken first."""
        self.stop_queries()
        self.targets.clear()
        self.settlements = None
        tails, self._tails = self._tails, []
        for tail in reversed(tails):
            tail.close()
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close()
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()
        if self.fence is not None:
            self.fence.release()
        self.pin_claims.close()
        # Last: its final page (up to ``pager.STOP_WAIT_S``) writes nothing to Kafka, so a
        # standby need not wait for it; after the queries, whose last letters are on it.
        pager, self.pager = self.pager, None
        if pager is not None:
            pager.stop()

    def remove(self, timeout_s: float) -> dict[str, dict[int, int]]:
        """Stop the route's queries once the batches they are running have committed (each is
        held at the start of its next batch, as a pause holds it), then commit the group's
        offsets; past ``timeout_s`` they are stopped as they are (a batch cut short is not
        committed and runs again if the route comes back). Then ``stop``. Returns the offsets
        committed, per topic."""
        name, names, running = self.route.name, set(self.query_names), list(self.queries)
        self.controls.pause(name)
        give_up = time.monotonic() + timeout_s
        while not self._settled(running) and time.monotonic() < give_up:
            if self.stop_event.wait(0.1):
                break
        else:
            if not self._settled(running):
                log.warning("route %s: stopped with a batch still running", name)
        self.queries = []
        # A batch held by the pause ends without starting, as a drain's held batch does
        # (its query's stop interrupts it: Spark takes that for the stop, not an error).
        for query_name in names:
            self.drain.stop(query_name)
        self.controls.remove(name)
        committed: dict[str, dict[int, int]] = {}
        for each in running:
            try:
                each.stop()
            except Exception as exc:
                log.warning("stopping %s: %s", each.name, query.short_error(str(exc)))
            committed.update(self._commit_last(each))
        self.targets.clear()
        self.drain.untrack(name, names)
        self.stop()
        return committed

    def _settled(self, queries: list[StreamingQuery]) -> bool:
        """Whether every batch of the route that was running has committed (the drain's
        ``quiet``), and no batch is between the pause and its start (each query is between
        batches, or held by the pause)."""
        if not self.drain.quiet(str(q.name) for q in queries):
            return False
        running = 0
        for each in queries:
            try:
                running += bool(each.status["isTriggerActive"])
            except Exception:  # a query that ended has nothing running
                continue
        return running <= self.controls.held(self.route.name)

    def _commit_last(self, stopped: StreamingQuery) -> dict[str, dict[int, int]]:
        """Commit the group's offsets of a stopped query's last committed batch (the listener
        may not have heard of it yet); what was committed, per topic."""
        target = self.targets.get(str(stopped.name))
        progress = stopped.lastProgress
        if target is None or progress is None or self.lock_lost():
            return {}
        out: dict[str, dict[int, int]] = {}
        for source in progress.sources:
            for topic in target.topics_of(source.endOffset):
                offsets = end_offsets(source.endOffset, topic)
                if offsets:
                    mark = positions.mark(f"batch={progress.batchId}")
                    admin = self._admins.of(target.cluster)
                    commit_offsets(admin, target.group, topic, offsets, metadata=mark)
                    out[topic] = offsets
        return out

    # -- drain ----------------------------------------------------------------------------

    def drained(self) -> bool:
        """Whether the route's drain is over; past its deadline it is, whatever is left."""
        name = self.route.name
        if time.monotonic() >= self.drain.deadline(name):
            return True
        if not self.drain.quiet(self.query_names):
            return False
        store = self.settlements
        if store is not None and self.drain.waiting_calls(name):
            try:
                store.catch_up()
            except Exception as exc:  # the answers stay in Kafka for the next run
                log.warning("drain: route %s: reading answers: %s", name, exc)
            self.drain.settle(name, store.of)
        return not self.drain.waiting_calls(name)

    def log_drain(self, *, hard: bool) -> None:
        """Log what the route's drain did; batches still running are cut by the stop."""
        name = self.route.name
        replayed = self.drain.busy(self.query_names)
        tally = self.drain.finish(name)
        extra = {"siding": fields(name, tally, replayed=replayed, hard=hard)}
        level = logging.WARNING if hard or replayed else logging.INFO
        log.log(level, summary(name, tally, replayed=replayed, hard=hard), extra=extra)


# Opening is done step by step across the routes opened together: a start refused for one
# route (its owner, its fence or lock, its topics) then claims and reconciles none of them.
# The lock (an unfenced route's) is taken before any topic is created: a route whose checkpoint
# is busy creates nothing. A fenced route creates its topics (its fence topic among them) first.
_PREPARE_STEPS: tuple[Callable[[RouteRuntime], None], ...] = (
    RouteRuntime._check_owner,
    RouteRuntime._take_lock,
    RouteRuntime._prepare,
)
_CLAIM_STEPS: tuple[Callable[[RouteRuntime], None], ...] = (
    RouteRuntime._take_fence,
    RouteRuntime._claim_pins,
    RouteRuntime._record_owner,
    RouteRuntime._reconcile,
)


def open_routes(runtimes: Sequence[RouteRuntime]) -> None:
    """``open`` every route of ``runtimes``, each step for all of them before the next; a
    failure gives back what any of them took."""
    _steps(runtimes, (*_PREPARE_STEPS, *_CLAIM_STEPS))


def prepare_routes(runtimes: Sequence[RouteRuntime]) -> None:
    """The first half of ``open_routes``: what a standby does before it starts Spark."""
    _steps(runtimes, _PREPARE_STEPS)


def claim_routes(runtimes: Sequence[RouteRuntime]) -> None:
    """The second half of ``open_routes``: the fence (a standby waits here), lock, owner."""
    _steps(runtimes, _CLAIM_STEPS)


def take_over(
    runtimes: Sequence[RouteRuntime], stop_event: threading.Event, spark: SparkSession
) -> bool:
    """A standby's wait for its routes' fences (``claim_routes``), its Python workers kept warm
    meanwhile; ``False`` when it was asked to stop before it took them (a clean stop: it held
    nothing)."""
    with kept_warm(lambda: warm_workers(spark)):
        log.info("siding: standby: Spark is up; waiting for the routes' fences")
        try:
            claim_routes(runtimes)
        except RouteStopped:
            if not stop_event.is_set():
                raise
            log.info("siding: standby stopped before it took the routes over")
            return False
    return True


def _steps(
    runtimes: Sequence[RouteRuntime], steps: tuple[Callable[[RouteRuntime], None], ...]
) -> None:
    try:
        for step in steps:
            for runtime in runtimes:
                step(runtime)
    except BaseException:
        for runtime in reversed(runtimes):
            runtime.stop()
        raise


def query_names(route: RouteConfig) -> list[str]:
    """Every query a route may run: its lanes and its park lane."""
    lanes = (naming.PARK_LANE, *range(len(route.lanes) + 1))
    return [naming.query_name(route.name, lane) for lane in lanes]


class LiveTargets(Mapping[str, CommitTarget]):
    """The commit targets of every running route by query name, read as they are now (a
    route's appear as it starts its queries and go when it stops)."""

    def __init__(self, routes: Mapping[str, RouteRuntime]) -> None:
        self._routes = routes

    def _now(self) -> tuple[RouteRuntime, ...]:
        return tuple(self._routes.values())  # routes come and go on other threads

    def __getitem__(self, name: str) -> CommitTarget:
        for runtime in self._now():
            target = runtime.targets.get(name)
            if target is not None:
                return target
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter([name for runtime in self._now() for name in tuple(runtime.targets)])

    def __len__(self) -> int:
        return sum(len(runtime.targets) for runtime in self._now())
