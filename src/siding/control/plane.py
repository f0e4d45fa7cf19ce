"""The driver's control plane as one piece: the HTTP API and the Kafka view behind its page."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from siding.config import RouteConfig, SidingConfig
from siding.control.kafka_view import POLL_S, KafkaView, route_topics
from siding.control.registry import RegistryService
from siding.control.server import ControlServer, HealthSource
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.metrics import MetricsSink


class ControlPlane:
    """``with ControlPlane(...) as plane:`` serves ``plane.url`` and polls Kafka for the page."""

    def __init__(
        self,
        config: SidingConfig,
        address: tuple[str, int],
        metrics: MetricsSink,
        queries: HealthSource,
        *,
        controls: RouteControls | None = None,
        poll_s: float = POLL_S,
        registry: RegistryService | None = None,
        drain: Callable[[], None] | None = None,
        draining: Callable[[], bool] | None = None,
        fences: Callable[[], Mapping[str, Mapping[str, object]]] | None = None,
    ) -> None:
        token = config.control.token.get_secret_value() if config.control.token else None
        topics = [route_topics(r) for r in config.route]
        clusters = {n: c.client_config() for n, c in config.kafka.clusters.items()}
        self.view = KafkaView(
            config.kafka.client_config(), topics, clusters=clusters, interval_s=poll_s
        )
        self.server = ControlServer(
            address,
            metrics,
            queries,
            controls=controls,
            token=token,
            kafka=self.view.facts,
            registry=registry,
            drain=drain,
            draining=draining,
            fences=fences,
        )

    def routes_changed(self, routes: Sequence[RouteConfig]) -> None:
        """The page follows routes made or deleted at runtime."""
        self.view.watch([route_topics(r) for r in routes])

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> ControlPlane:
        self.view.start()
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.view.stop()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
