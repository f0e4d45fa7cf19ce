"""What a Python worker process keeps between batches: one event loop, transports, breakers,
producers. Spark reuses Python workers (``spark.python.worker.reuse``), so connections live on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from siding.config import Endpoint, RouteConfig
from siding.dispatch import BreakerSettings, CircuitBreaker
from siding.routing.producer import DurableProducer
from siding.transport.base import Transport
from siding.transport.factory import make_transport


@dataclass
class _Endpoint:
    transport: Transport
    breaker: CircuitBreaker


@dataclass
class WorkerRuntime:
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    endpoints: dict[tuple[str, str], _Endpoint] = field(default_factory=dict)
    producers: dict[tuple[tuple[str, str], ...], DurableProducer] = field(default_factory=dict)

    def endpoint(
        self, route: RouteConfig, endpoint: Endpoint, breaker: BreakerSettings, connections: int
    ) -> tuple[Transport, CircuitBreaker]:
        key = (route.name, endpoint.url)
        entry = self.endpoints.get(key)
        if entry is None:
            transport = make_transport(route, endpoint, connections)
            entry = _Endpoint(transport, CircuitBreaker(breaker, transport.probe))
            self.endpoints[key] = entry
        return entry.transport, entry.breaker

    def producer(self, client_conf: Mapping[str, object]) -> DurableProducer:
        key = tuple(sorted((k, str(v)) for k, v in client_conf.items()))
        producer = self.producers.get(key)
        if producer is None:
            producer = self.producers[key] = DurableProducer(client_conf)
        return producer


_lock = threading.Lock()
_runtimes: list[WorkerRuntime] = []  # at most one per process


def runtime() -> WorkerRuntime:
    with _lock:
        if not _runtimes:
            _runtimes.append(WorkerRuntime())
        return _runtimes[0]
