"""One in-flight and rate budget per route and endpoint, shared by every window that sends to it
(docs/dispatch.md, "One budget per route and endpoint").

The window asks a ``Budget`` for a ``Lease`` before each send and gives it back when the call
ends, answered or not, parked or not. This module holds the interface, the pure arithmetic of
the rate limit, and ``LocalBudget``, the in-process form (one event loop); the form shared by
the Python workers of a machine is ``siding.pipeline.executor.budget``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# Clock arithmetic in floats leaves a token at 0.9999999999: that is a token.
_EPSILON = 1e-9
# The rate limit remembers at most this many send times (more than any sane per-second rate).
RING_MAX = 100_000
# A send reaches the consumer's handler some time after the budget let it go, and not always
# equally late (a worker's loop or the consumer's process not scheduled for a moment, on a busy
# machine). The ring of send times makes "never more than rate_limit sends begun in any second"
# exact at siding; to keep it at the consumer too, the token bucket paces sends this much below
# the rate: sends let go evenly at rate / (1 + PACE_MARGIN) may reach the consumer up to
# PACE_MARGIN seconds (less a token or two, see ``budget_burst``) unevenly late and still stay
# within rate_limit in any second there. A route sends 91 % of rate_limit sustained.
PACE_MARGIN = 0.1


class Lease(Protocol):
    def release(self) -> None:
        """Give the slot back; a second call does nothing."""


class Budget(Protocol):
    """What a window needs from the budget of its route and endpoint (on the loop's thread)."""

    def take(self) -> Lease | float:
        """A slot and a rate token now, or the seconds to wait before asking again."""

    def watch(self, wake: asyncio.Event) -> Callable[[], None]:
        """Set ``wake`` whenever this process gives a slot back; returns the unsubscribe."""


def host_share(total: float, executors: int) -> float:
    """What one executor's budget holds of a route's ``total`` (in-flight or rate) when the
    route runs on ``executors`` executors that cannot see each other's calls."""
    return total / max(1, executors)


def host_slots(max_in_flight: int, executors: int) -> int:
    """An executor's slots: never 0, so every executor can make progress. On ``N`` executors the
    consumer sees at most ``N * ceil(max_in_flight / N)`` calls (under ``max_in_flight + N``)."""
    return max(1, math.ceil(host_share(max_in_flight, executors)))


def ring_size(rate: float) -> int:
    """How many send times the rate limit keeps: one second's worth (at least one)."""
    return max(1, min(RING_MAX, math.floor(rate)))


def ring_window_s(rate: float) -> float:
    """The span in which at most ``ring_size(rate)`` sends may start: 1 s for a rate of 1 or
    more, so no 1 s window holds more than ``rate`` sends begun; longer below 1."""
    return ring_size(rate) / rate


def paced(rate: float) -> float:
    """The rate the token bucket refills at: ``rate`` less the margin for uneven arrival."""
    return rate / (1 + PACE_MARGIN)


def refill(tokens: float, at: float, now: float, rate: float, burst: float) -> float:
    """The bucket's tokens at ``now`` (it last held ``tokens`` at ``at``), refilled at the
    paced rate of a ``rate`` limit."""
    if now <= at:
        return tokens
    return min(burst, tokens + (now - at) * paced(rate))


def rate_wait_s(tokens: float, oldest_s: float, now: float, rate: float) -> float:
    """Seconds until one more send may start: a token must be in the bucket (the pace: bursts
    of at most ``burst``), and the send ``ring_size`` sends ago must have started at least
    ``ring_window_s`` ago (the promise: never more than ``rate`` sends begun in any second).
    ``tokens`` is already refilled to ``now``; 0 means now."""
    bucket = 0.0 if tokens >= 1 - _EPSILON else (1 - tokens) / paced(rate)
    ring = max(0.0, oldest_s + ring_window_s(rate) - now)
    return max(bucket, ring)


def budget_burst(rate: float) -> float:
    """The bucket's depth: two tokens (one below 20/s), so that a sender woken a little late
    still keeps the pace on average, while a burst eats little of the arrival margin."""
    return 1.0 if rate < 20 else 2.0


@dataclass
class _LocalLease:
    budget: LocalBudget
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.budget._give_back()


@dataclass
class LocalBudget:
    """The budget of one process: ``limit`` calls at once, ``rate`` sends per second (0 = no
    rate limit); ``clock`` is monotonic seconds. Used where one event loop is every sender."""

    limit: int
    rate: float = 0.0
    burst: float | None = None
    clock: Callable[[], float] = field(default=lambda: asyncio.get_running_loop().time())
    held: int = 0
    _tokens: float = field(init=False)
    _at: float = field(init=False, default=-math.inf)
    _ring: list[float] = field(init=False)
    _head: int = field(init=False, default=0)
    _wakes: set[asyncio.Event] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._tokens = self._burst()
        self._ring = [-math.inf] * ring_size(self.rate) if self.rate else []

    def _burst(self) -> float:
        return budget_burst(self.rate) if self.burst is None else self.burst

    def take(self) -> Lease | float:
        if self.held >= self.limit:
            return math.inf  # a local release wakes the window (``watch``)
        if self.rate:
            now = self.clock()
            self._tokens = refill(self._tokens, self._at, now, self.rate, self._burst())
            self._at = max(self._at, now)
            wait_s = rate_wait_s(self._tokens, self._ring[self._head], now, self.rate)
            if wait_s > 0:
                return wait_s
            self._tokens -= 1
            self._ring[self._head] = now
            self._head = (self._head + 1) % len(self._ring)
        self.held += 1
        return _LocalLease(self)

    def _give_back(self) -> None:
        self.held -= 1
        for wake in self._wakes:
            wake.set()

    def watch(self, wake: asyncio.Event) -> Callable[[], None]:
        self._wakes.add(wake)
        return lambda: self._wakes.discard(wake)
