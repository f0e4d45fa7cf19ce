"""One running siding: the Spark application, the control API on the driver and, when routes
or consumer instances may come at runtime, the registry (docs/registration.md). ``siding run``
drives it; tests run it in-process on their own SparkSession."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from siding.config import RouteConfig, SidingConfig
from siding.control.app_health import application_health
from siding.control.plane import ControlPlane
from siding.control.registry import RegistryService
from siding.pipeline.driver.app import Application
from siding.pipeline.driver.batch import BatchSink
from siding.pipeline.driver.metrics import MetricsSink
from siding.pipeline.executor.result import TaskResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("siding.run")

ResultCallback = Callable[[str, int, list[TaskResult], float], None]


def needs_registry(config: SidingConfig) -> bool:
    """Routes can be made through the API, or some route lets consumer instances join."""
    return config.control.takes_routes or any(r.takes_registrations for r in config.route)


class SidingRun:
    """``start()``, then ``run()`` (blocks until a stop or a failed route), then ``stop()``."""

    def __init__(
        self,
        config: SidingConfig,
        *,
        spark: SparkSession | None = None,
        also: ResultCallback | None = None,
        standby: bool = False,
    ) -> None:
        self.config = config
        self.standby = standby
        self.metrics = MetricsSink()
        self.registry = RegistryService(config) if needs_registry(config) else None
        self._spark = spark
        self._also = also
        self.app: Application | None = None
        self.control: ControlPlane | None = None
        self.stop_event = threading.Event()  # set it (a signal) to stop, even while starting

    @property
    def url(self) -> str | None:
        return self.control.url if self.control is not None else None

    def start(self) -> SidingRun:
        config = self.config
        if self.registry is not None:
            api_routes = self.registry.open()
            config = config.model_copy(update={"route": (*config.route, *api_routes)})
        for route in config.route:
            self.metrics.declare(route.name, 1 + len(route.lanes), pages=route.dlq_page is not None)
        app = Application(
            config,
            sink=self._sink(),
            spark=self._spark,
            stop_event=self.stop_event,
            standby=self.standby,
        )
        self.app = app
        address = config.control.address()
        if address:
            self.control = ControlPlane(
                config,
                address,
                self.metrics,
                lambda: application_health(app),
                controls=app.controls,
                registry=self.registry,
                drain=app.request_drain,
                draining=app.drain.requested.is_set,
                fences=app.fences if config.fenced else None,
            )
            self.control.start()
            log.info(
                "siding: control API on %s (/health /ready /status /metrics /routes)", self.url
            )
        app.start()
        if self.registry is not None:
            self.registry.attach(app, self._routes_changed)
            self.registry.start()
        log.info("siding: running %d route(s); Ctrl-C to stop", len(config.route))
        return self

    def _sink(self) -> BatchSink:
        also = self._also
        if also is None:
            return self.metrics.sink
        metrics = self.metrics

        def both(route: str, lane: int, results: list[TaskResult], seconds: float) -> None:
            metrics.on_result(route, lane, results, seconds)
            also(route, lane, results, seconds)

        return BatchSink(both, metrics.on_page)

    def _routes_changed(self, routes: Sequence[RouteConfig]) -> None:
        for route in routes:
            self.metrics.declare(route.name, 1 + len(route.lanes), pages=route.dlq_page is not None)
        if self.control is not None:
            self.control.routes_changed(routes)

    def request_stop(self) -> None:
        """What a signal does: the first begins a drain, the next one stops at once (before
        the application exists, it stops)."""
        if self.app is None:
            self.stop_event.set()
        else:
            self.app.request_stop()

    def run(self) -> None:
        """Until a drain or a stop is asked, or a route fails."""
        assert self.app is not None
        self.app.run()

    def drain(self) -> None:
        """The draining stop (docs/operations.md, "Stopping siding"); then ``stop``."""
        assert self.app is not None
        self.app.drain_routes()

    def stop(self) -> None:
        if self.app is not None:
            self.app.stop()
        if self.control is not None:
            self.control.stop()
        if self.registry is not None:
            self.registry.stop()
