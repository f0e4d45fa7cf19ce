"""The Spark application: the session, the group-commit listener and the running routes."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from siding.config import RouteConfig, SidingConfig
from siding.pipeline.driver.batch import BatchSink
from siding.pipeline.driver.clusters import Admins
from siding.pipeline.driver.commits import make_listener
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.drain import Drain, quiet_py4j
from siding.pipeline.driver.fence import driver_id
from siding.pipeline.driver.query import short_error
from siding.pipeline.driver.route import (
    LiveTargets,
    RouteRuntime,
    claim_routes,
    prepare_routes,
    take_over,
)
from siding.pipeline.driver.session import build_session, effective_master, task_slots
from siding.pipeline.driver.stops import RouteStops, one_line
from siding.pipeline.driver.topics import RouteFailed
from siding.pipeline.offline.hadoop_fs import release_private_jvm
from siding.pipeline.offline.storage import scheme

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


@dataclass
class Application:
    """Owns the SparkSession, the listener and the routes (one ``RouteRuntime`` each, by
    name); ``run`` blocks until ``stop`` or a failure."""

    config: SidingConfig
    sink: BatchSink = field(default_factory=BatchSink)
    on_progress: Callable[[str, Any], None] = lambda *_: None
    stop_event: threading.Event = field(default_factory=threading.Event)
    spark: SparkSession | None = None
    controls: RouteControls = field(default_factory=RouteControls)
    drain: Drain = field(default_factory=Drain)
    _own_session: bool = False
    _listener: Any = None
    _admins: Admins | None = None
    _routes: dict[str, RouteRuntime] = field(default_factory=dict)
    _routes_lock: threading.Lock = field(default_factory=threading.Lock)
    stops: RouteStops = field(default_factory=RouteStops)
    # Start Spark, then wait for the routes' fences (docs/operations.md, "the fence").
    standby: bool = False
    driver: str = field(default_factory=driver_id)
    _opening: list[RouteRuntime] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stops = RouteStops(self.stop_event)
        self.controls = RouteControls(
            {route.name: route for route in self.config.route}, self.config.control.registry_topic
        )
        timeouts = {route.name: route.drain_timeout_s for route in self.config.route}
        self.drain = Drain(timeouts, hard=self.stop_event)

    @property
    def queries(self) -> list[StreamingQuery]:
        """Every query running now, route by route."""
        return [query for route in tuple(self._routes.values()) for query in route.queries]

    def _running(self) -> list[tuple[RouteRuntime, StreamingQuery]]:
        """Every query running now, with its route."""
        return [(route, query) for route in tuple(self._routes.values()) for query in route.queries]

    def _runtime(self, route: RouteConfig, config: SidingConfig, admins: Admins) -> RouteRuntime:
        return RouteRuntime(
            route,
            config,
            admins,
            sink=self.sink,
            stop=self.stop_event,
            controls=self.controls,
            drain=self.drain,
            stops=self.stops,
            standby=self.standby,
            driver=self.driver,
        )

    def fences(self) -> dict[str, dict[str, object]]:
        """Each fenced route's fence (holder, epoch, whether this driver waits for it)."""
        runtimes = (*self._opening, *self._routes.values())
        return {r.route.name: r.fence.state() for r in runtimes if r.fence is not None}

    def start(self) -> None:
        """Open every route (topics, checkpoint), then start Spark and every route's queries.
        A SparkSession passed in as ``spark`` is used (and left running on ``stop``);
        otherwise one is built from the config. A failed start holds no route (``stop`` may
        never come)."""
        config = self.config
        admins = Admins(config.kafka)  # one admin client per cluster the routes use
        runtimes = [self._runtime(route, config, admins) for route in config.route]
        self._opening = runtimes
        prepare_routes(runtimes)
        if not self.standby:
            claim_routes(runtimes)
        try:
            if self.spark is None:
                slots = sum(task_slots(r.route, r.partitions) for r in runtimes)
                self.spark = build_session(
                    effective_master(config.spark.master, slots, os.cpu_count() or 1),
                    app_name=config.spark.app_name,
                    extra=config.spark.conf_values(),
                    jars_dir=config.spark.jars_dir,
                    s3a=scheme(config.spark.checkpoint_dir) == "s3a",
                )
                self._own_session = True
            if self.standby and not take_over(runtimes, self.stop_event, self.spark):
                return
            release_private_jvm()  # Spark's JVM serves the checkpoint's files from now on
            quiet_py4j()
            self.drain.open_signal()
            self._admins = admins
            self._routes.update((r.route.name, r) for r in runtimes)
            targets = LiveTargets(self._routes)  # the listener reads the routes' targets live
            self._listener = make_listener(admins, targets, self.on_progress, self.drain.progressed)
            self.spark.streams.addListener(self._listener)
            for runtime in runtimes:
                runtime.start(self.spark)
        except BaseException:
            self._routes.clear()
            for runtime in reversed(runtimes):
                runtime.stop()
            raise

    def add_route(self, route: RouteConfig) -> None:
        """Start a route made at runtime (docs/registration.md), as ``start`` starts one from
        the config: its topics, its checkpoint's owner, its state and its queries."""
        with self._routes_lock:
            if self.spark is None or self._admins is None:
                raise RouteFailed(f"route {route.name}: the application is not running")
            if route.name in self._routes:
                raise RouteFailed(f"route {route.name} is already running")
            config = self.config.model_copy(update={"route": (*self.config.route, route)})
            runtime = self._runtime(route, config, self._admins)
            runtime.open()
            self.config = config
            self.controls.add(route)
            self.drain.track(route.name, route.drain_timeout_s, runtime.query_names)
            self._routes[route.name] = runtime
            try:
                runtime.start(self.spark)
            except BaseException:  # it gave back what it took: forget it
                self.controls.remove(route.name)
                self.drain.untrack(route.name, runtime.query_names)
                self._forget(route.name)
                raise

    def remove_route(self, name: str, timeout_s: float) -> dict[str, dict[int, int]]:
        """Stop a route once its running batches have committed, commit the group's offsets
        (``RouteRuntime.remove``). Returns the offsets committed, per topic. Lanes, DLQ,
        state topics and checkpoints stay (docs/registration.md)."""
        with self._routes_lock:
            runtime = self._routes.get(name)
            if runtime is None:
                raise RouteFailed(f"no route named {name!r} is running")
            committed = runtime.remove(timeout_s)
            self._forget(name)
            return committed

    def _forget(self, name: str) -> None:
        self._routes.pop(name, None)
        self.config = self.config.model_copy(
            update={"route": tuple(r for r in self.config.route if r.name != name)}
        )

    def request_drain(self) -> None:
        """Begin a draining stop (``run`` returns; then call ``drain_routes`` and ``stop``)."""
        if self.drain.begin():
            log.info("siding: draining (a second signal stops at once)")

    def request_stop(self) -> None:
        """What a signal does: the first begins a drain, the next one stops at once."""
        if self.drain.requested.is_set() or not self._routes:  # a standby stops at once
            self.stop_event.set()
        else:
            self.request_drain()

    def run(self, poll_s: float = 0.5) -> None:
        """Block until a drain or a stop is asked (``request_drain``, ``stop_event``) or a route
        stops (``RouteFailed``, whose message is the one line that says why: the reason a batch
        recorded, or the failed query's)."""
        while not self.stop_event.is_set() and not self.drain.requested.wait(poll_s):
            for runtime, query in self._running():
                try:
                    active = query.isActive
                    error = None if active else query.exception()
                except Exception as exc:  # the JVM went away (it got the signal too)
                    if self.stop_event.is_set():
                        break
                    raise RouteFailed(f"lost the Spark driver: {one_line(str(exc))}") from exc
                if active or query not in runtime.queries:  # (a route being deleted)
                    continue
                if not runtime.restart(query, str(error)):
                    self.stops.record(f"{query.name} stopped: {short_error(str(error))}")
                    break
        if self.stops.reason is not None:
            raise RouteFailed(self.stops.reason)

    def drain_routes(self, poll_s: float = 0.1) -> None:
        """The drain (docs/operations.md, "Stopping siding"): no batch starts; wait, per route
        and at most its ``drain_timeout``, until the batches running have committed and the
        calls parked in the workers have answered; log what each route's drain did. A second
        signal (``stop_event``) ends the wait at once."""
        self.request_drain()
        pending = dict(self._routes)
        while pending and not self.stop_event.is_set():
            for name, runtime in list(pending.items()):
                if runtime.drained():
                    runtime.log_drain(hard=False)
                    del pending[name]
            if pending:
                self.stop_event.wait(poll_s)
        for runtime in pending.values():
            runtime.log_drain(hard=True)

    def stop(self) -> None:
        """Stop every query, then the session, then give back what each route holds. Offsets
        are committed by Spark only after a batch succeeded, so stopping (or losing the JVM)
        mid-batch never commits past a record; a batch held by a drain (or cut by the stop)
        ends as a stop, with nothing committed."""
        self.drain.requested.set()
        self.stop_event.set()
        spark, self.spark = self.spark, None
        runtimes = list(self._routes.values())
        for runtime in runtimes:
            runtime.stop_queries()
        try:
            if spark is not None and self._listener is not None:
                spark.streams.removeListener(self._listener)
                self._listener.release()
            if spark is not None and self._own_session:
                spark.stop()
        except Exception as exc:
            log.warning("stopping Spark: %s", str(exc).splitlines()[0] if str(exc) else exc)
        for runtime in runtimes:
            runtime.stop()
        self.drain.close_signal()
