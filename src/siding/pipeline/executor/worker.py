"""What a Python worker process keeps between batches: one event loop running in its own thread,
transports, breakers, park timers, adaptive limits, producers, and the calls that outlived their
batch.

Spark reuses Python workers (``spark.python.worker.reuse``), so connections live on; the loop's
thread keeps parked calls running between tasks (docs/parking.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from siding.config import Endpoint, RouteConfig
from siding.dispatch import BreakerSettings, CircuitBreaker, ParkTimer
from siding.dispatch.adaptive import Limit
from siding.dispatch.breaker import BreakerState
from siding.kafka.tail import TopicTail
from siding.pipeline.executor.live import LiveCalls
from siding.pipeline.executor.parked import ParkedCalls
from siding.registry import MemberFeed
from siding.registry.join import DEFAULT_CAPACITY
from siding.routing.producer import DurableProducer
from siding.transport.base import Transport
from siding.transport.factory import make_transport
from siding.transport.pool import Member, PoolTransport

T = TypeVar("T")


@dataclass
class _Endpoint:
    transport: Transport
    breaker: CircuitBreaker
    timer: ParkTimer
    breaker_epoch: int = 0  # the operator's last "close the breaker" seen (pipeline.controls)
    # A route whose consumer instances join at runtime: the pool, and what it was built from.
    pool: PoolTransport | None = None
    built_from: tuple[object, ...] = ()
    # The adaptive limit by lane, carried from one batch's window to the next.
    limits: dict[int, Limit] = field(default_factory=dict)


# The key of a route's pool of instances among its endpoints (docs/registration.md).
POOL = "registered instances"
# How long a task's first dispatch waits for the worker's first read of the registry.
FEED_WAIT_S = 10.0


def transport_settings(route: RouteConfig) -> tuple[object, ...]:
    """What a route's transports are built from (a limit changed at runtime is not)."""
    return (route.subscription, route.endpoint, route.auth, route.transport, route.batch,
            route.max_message_bytes)  # fmt: skip


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
    feeds: dict[tuple[str, tuple[tuple[str, str], ...]], MemberFeed] = field(default_factory=dict)
    parked: ParkedCalls = field(init=False)
    live: LiveCalls = field(init=False)

    def __post_init__(self) -> None:
        self.parked = ParkedCalls(self.loop)
        self.live = LiveCalls(self.loop)

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
        return self._closed_by_operator(entry, breaker_epoch)

    def limits(self, key: tuple[str, str]) -> dict[int, Limit]:
        """The adaptive limits (by lane) of an endpoint ``endpoint`` or ``pool`` made."""
        return self.endpoints[key].limits

    def _closed_by_operator(
        self, entry: _Endpoint, breaker_epoch: int
    ) -> tuple[Transport, CircuitBreaker, ParkTimer]:
        if breaker_epoch > entry.breaker_epoch:
            # An operator closed the route's breakers: on the loop, where the breaker lives.
            entry.breaker_epoch = breaker_epoch
            self.loop.call_soon_threadsafe(entry.breaker.close)
        return entry.transport, entry.breaker, entry.timer

    def pool(
        self,
        route: RouteConfig,
        *,
        registry_topic: str,
        client_conf: Mapping[str, object],
        breaker: BreakerSettings,
        connections: int,
        breaker_epoch: int = 0,
    ) -> tuple[Transport, CircuitBreaker, ParkTimer]:
        """The route's pool of instances (its configured endpoints and those that joined),
        behind one breaker; an instance joining closes that breaker at once."""
        key = (route.name, POOL)
        entry = self.endpoints.get(key)
        built_from = transport_settings(route)
        if entry is not None and entry.built_from != built_from:
            # The route was deleted and made again with other settings: start afresh.
            del self.endpoints[key]
            asyncio.run_coroutine_threadsafe(entry.transport.close(), self.loop)
            entry = None
        if entry is None:
            feed = self.feed(registry_topic, client_conf)
            feed.wait_ready(FEED_WAIT_S)
            configured = tuple(
                Member(f"config:{e.url}", e, DEFAULT_CAPACITY) for e in route.endpoint
            )

            def members() -> tuple[int, tuple[Member, ...]]:
                version, joined = feed.members(route.name)
                return version, (*configured, *joined)

            pool = PoolTransport(
                members, lambda e: make_transport(route, e, connections), name=route.name
            )
            entry = _Endpoint(pool, CircuitBreaker(breaker, pool.probe), ParkTimer())
            entry.breaker_epoch, entry.pool, entry.built_from = breaker_epoch, pool, built_from
            self.endpoints[key] = entry
            feed.subscribe(self._on_members(key, entry))
        return self._closed_by_operator(entry, breaker_epoch)

    def _on_members(self, key: tuple[str, str], entry: _Endpoint) -> Callable[[set[str]], None]:
        def changed(routes: set[str]) -> None:
            if key[0] in routes and self.endpoints.get(key) is entry:
                self.loop.call_soon_threadsafe(self._joined, entry)

        return changed

    @staticmethod
    def _joined(entry: _Endpoint) -> None:
        """On the loop: an instance that came in is tried at once, breaker open or not."""
        assert entry.pool is not None
        if entry.pool.refresh() and entry.breaker.state is not BreakerState.CLOSED:
            entry.breaker.close()

    def feed(self, topic: str, client_conf: Mapping[str, object]) -> MemberFeed:
        key = (topic, tuple(sorted((k, str(v)) for k, v in client_conf.items())))
        feed = self.feeds.get(key)
        if feed is None:
            conf = dict(client_conf)
            feed = self.feeds[key] = MemberFeed(lambda: TopicTail(conf, topic).read_new)
        return feed

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
