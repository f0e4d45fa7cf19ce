"""One admin client per Kafka cluster the driver talks to, made when first asked for."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from siding.config import DEFAULT_CLUSTER, KafkaConfig, Role, RouteConfig, cluster_name
from siding.kafka.admin import admin_client


class Admins:
    """The driver's admin clients, by cluster name (``[kafka]`` is ``default``): a route's
    source cluster checks its sources and takes its group's commits, its write cluster gets
    its lanes, DLQ and state topics (``siding.config.cluster_name``)."""

    def __init__(
        self,
        kafka: KafkaConfig,
        make: Callable[[Mapping[str, str]], Any] = admin_client,
    ) -> None:
        self._kafka = kafka
        self._make = make
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def of(self, name: str = DEFAULT_CLUSTER) -> Any:
        with self._lock:
            client = self._clients.get(name)
            if client is None:
                conf = self._kafka.cluster(name).client_config()
                client = self._clients[name] = self._make({k: str(v) for k, v in conf.items()})
            return client

    def for_route(self, route: RouteConfig, role: Role) -> Any:
        return self.of(cluster_name(route, role))
