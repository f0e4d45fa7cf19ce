"""The shared CircuitBreaker on a real event loop: waiting, one prober, doubling, listeners."""

from __future__ import annotations

import asyncio
import time

import pytest

from siding.dispatch.breaker import (
    BreakerSettings,
    BreakerState,
    BreakerTransition,
    CircuitBreaker,
)
from siding.model import OutcomeKind

FAST = BreakerSettings(failure_threshold=2, open_for_s=0.05, max_open_for_s=0.2, probe_timeout_s=1)


class Endpoint:
    """A probe target whose health the test switches; counts probes and overlapping probes."""

    def __init__(self, healthy: bool = True, probe_s: float = 0.0) -> None:
        self.healthy = healthy
        self.probe_s = probe_s
        self.probes = 0
        self.probing = 0
        self.max_probing = 0

    async def probe(self) -> bool:
        self.probes += 1
        self.probing += 1
        self.max_probing = max(self.max_probing, self.probing)
        try:
            await asyncio.sleep(self.probe_s)
            return self.healthy
        finally:
            self.probing -= 1


def trip(breaker: CircuitBreaker) -> None:
    for _ in range(breaker.settings.failure_threshold):
        breaker.record(OutcomeKind.BACKOFF)


async def test_closed_breaker_returns_at_once_without_probing() -> None:
    endpoint = Endpoint()
    breaker = CircuitBreaker(FAST, endpoint.probe)
    await asyncio.wait_for(breaker.wait_closed(), 1)
    assert breaker.state is BreakerState.CLOSED
    assert endpoint.probes == 0


async def test_open_then_half_open_then_closed_after_a_good_probe() -> None:
    # Given a breaker tripped by BACKOFF answers
    endpoint = Endpoint()
    breaker = CircuitBreaker(FAST, endpoint.probe)
    seen: list[BreakerTransition] = []
    breaker.add_listener(seen.append)
    trip(breaker)
    assert breaker.state is BreakerState.OPEN
    opened_at = time.monotonic()
    # When a caller waits
    await asyncio.wait_for(breaker.wait_closed(), 2)
    # Then it waited out the open time, probed once and closed
    assert time.monotonic() - opened_at >= FAST.open_for_s * 0.9
    assert endpoint.probes == 1
    assert [(t.before, t.after) for t in seen] == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]


async def test_many_waiters_share_one_prober() -> None:
    endpoint = Endpoint(probe_s=0.05)
    breaker = CircuitBreaker(FAST, endpoint.probe)
    trip(breaker)
    await asyncio.wait_for(asyncio.gather(*(breaker.wait_closed() for _ in range(20))), 2)
    assert endpoint.probes == 1
    assert endpoint.max_probing == 1
    assert breaker.state is BreakerState.CLOSED


async def test_failed_probes_reopen_with_doubled_time_until_the_endpoint_is_back() -> None:
    endpoint = Endpoint(healthy=False)
    breaker = CircuitBreaker(FAST, endpoint.probe)
    trip(breaker)
    waiter = asyncio.create_task(breaker.wait_closed())
    deadline = time.monotonic() + 2
    while endpoint.probes < 3:
        assert time.monotonic() < deadline, "the breaker stopped probing"
        await asyncio.sleep(0.01)
    assert not waiter.done()
    assert breaker.status.open_for_s == FAST.max_open_for_s
    endpoint.healthy = True
    await asyncio.wait_for(waiter, 2)
    assert breaker.state is BreakerState.CLOSED


async def test_a_probe_that_raises_or_hangs_counts_as_failed() -> None:
    async def broken() -> bool:
        raise ConnectionResetError("boom")

    async def hanging() -> bool:
        await asyncio.sleep(10)
        return True

    for probe in (broken, hanging):
        settings = BreakerSettings(
            failure_threshold=1, open_for_s=0.01, max_open_for_s=0.01, probe_timeout_s=0.05
        )
        breaker = CircuitBreaker(settings, probe)
        breaker.record(OutcomeKind.BACKOFF)
        seen: list[BreakerTransition] = []
        breaker.add_listener(seen.append)
        waiter = asyncio.create_task(breaker.wait_closed())
        deadline = time.monotonic() + 2
        while not any(t.before is BreakerState.HALF_OPEN for t in seen):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert seen[-1].after is BreakerState.OPEN


async def test_cancelled_prober_hands_probing_to_another_waiter() -> None:
    endpoint = Endpoint(probe_s=10)
    breaker = CircuitBreaker(FAST, endpoint.probe)
    trip(breaker)
    first = asyncio.create_task(breaker.wait_closed())
    deadline = time.monotonic() + 2
    while endpoint.probing == 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    second = asyncio.create_task(breaker.wait_closed())
    await asyncio.sleep(0.01)
    # When the prober is cancelled, the other waiter takes over the probe
    first.cancel()
    endpoint.probe_s = 0.0
    await asyncio.wait_for(second, 2)
    assert endpoint.probes == 2
    assert breaker.state is BreakerState.CLOSED


async def test_removed_listener_hears_nothing() -> None:
    breaker = CircuitBreaker(FAST, Endpoint().probe)
    seen: list[BreakerTransition] = []
    remove = breaker.add_listener(seen.append)
    remove()
    trip(breaker)
    assert breaker.state is BreakerState.OPEN
    assert seen == []
