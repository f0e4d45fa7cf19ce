"""What a Python worker process keeps between batches: one event loop running in its own thread,
transports, breakers, park timers, producers, and the calls that outlived their batch.

Spark reuses Python workers (``spark.python.worker.reuse``), so connections live on; the loop's
thread keeps parked calls running between tasks (docs/parking.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from siding.config import Endpoint, RouteConfig
from siding.dispatch import BreakerSettings, CircuitBreaker, ParkTimer
from siding.pipeline.parked import ParkedCalls
from siding.routing.producer import DurableProducer
from siding.transport.base import Transport
from siding.transport.factory import make_transport

T = TypeVar("T")


@dataclass
class _Endpoint:
    transport: Transport
    breaker: CircuitBreaker
    timer: ParkTimer
    breaker_epoch: int = 0  # the operator's last "close the breaker" seen (pipeline.controls)


def _start_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="siding-worker-loop", daemon=True).start()
    return loop


@dataclass
class WorkerRuntime:
    loop: asyncio.AbstractEventLoop = field(default_factory=_start_loop)
    endpoints: dict[tuple[str, str], _Endpoint] = field(default_factory=dict)
    producers: dict[tuple[str, tuple[tuple[str, str], ...]], DurableProducer] = field(
        default_factory=dict
    )
    parked: ParkedCalls = field(init=False)

    def __post_init__(self) -> None:
        self.parked = ParkedCalls(self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker's loop and wait for it (from a task's thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def endpoint(
        self,
        route: RouteConfig,
        endpoint: Endpoint,
        breaker: BreakerSettings,
        connections: int,
        breaker_epoch: int = 0,
    ) -> tuple[Transport, CircuitBreaker, ParkTimer]:
        key = (route.name, endpoint.url)
        entry = self.endpoints.get(key)
        if entry is None:
            transport = make_transport(route, endpoint, connections)
            entry = _Endpoint(transport, CircuitBreaker(breaker, transport.probe), ParkTimer())
            entry.breaker_epoch = breaker_epoch
            self.endpoints[key] = entry
        if breaker_epoch > entry.breaker_epoch:
            # An operator closed the route's breakers: on the loop, where the breaker lives.
            entry.breaker_epoch = breaker_epoch
            self.loop.call_soon_threadsafe(entry.breaker.close)
        return entry.transport, entry.breaker, entry.timer

    def producer(self, client_conf: Mapping[str, object], use: str = "records") -> DurableProducer:
        """One producer per client config and use: settlements are written from the loop's
        executor while a task writes its records, and a failure replaces only its own client."""
        key = (use, tuple(sorted((k, str(v)) for k, v in client_conf.items())))
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
