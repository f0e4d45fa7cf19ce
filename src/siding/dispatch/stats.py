"""What one dispatch saw: answers per kind, latencies, window use, breaker activity."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from siding.dispatch.breaker import BreakerTransition
from siding.model import OutcomeKind

LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0
)  # fmt: skip


MAX_HOLDOUTS = 10


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Send latencies in fixed buckets: ``counts[i]`` is the number at or below ``bounds_s[i]``
    and above the bound before; the last count is above every bound."""

    bounds_s: tuple[float, ...] = LATENCY_BOUNDS_S
    counts: tuple[int, ...] = (0,) * (len(LATENCY_BOUNDS_S) + 1)
    count: int = 0
    sum_s: float = 0.0
    max_s: float = 0.0

    def quantile(self, q: float) -> float:
        """An upper estimate of the ``q`` quantile: the bound of the bucket holding it."""
        if self.count == 0:
            return 0.0
        rank = q * self.count
        seen = 0
        for bound, n in zip(self.bounds_s, self.counts, strict=False):
            seen += n
            if seen >= rank:
                return min(bound, self.max_s)
        return self.max_s


@dataclass(frozen=True, slots=True)
class DispatchStats:
    sends: int = 0
    outcomes: Mapping[OutcomeKind, int] = field(default_factory=dict)
    followed: int = 0
    parked: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    max_in_flight: int = 0
    final_limit: int = 0
    breaker_transitions: tuple[BreakerTransition, ...] = ()
    breaker_wait_s: float = 0.0
    # Suspects (docs/dispatch.md): messages out when the consumer went away, sends of one alone,
    # and the ones dead-lettered for it.
    suspected: int = 0
    isolations: int = 0
    convicted: int = 0
    handed_over: int = 0  # suspects left to the park lane when nothing else was left
    # Key mode (docs/dispatch.md): retries kept in the batch that failed them, and those of them
    # that left it before their time (nothing else kept the batch running).
    retried_in_batch: int = 0
    left_batch: int = 0
    # (delivery id, reason) of messages moved on after being turned away for a whole deadline.
    holdouts: tuple[tuple[str, str], ...] = ()


class StatsRecorder:
    """Collects while a dispatch runs; ``snapshot`` freezes it."""

    def __init__(self) -> None:
        self._sends = 0
        self._outcomes: Counter[OutcomeKind] = Counter()
        self._followed = 0
        self._parked = 0
        self._counts = [0] * (len(LATENCY_BOUNDS_S) + 1)
        self._latency_sum = 0.0
        self._latency_max = 0.0
        self._max_in_flight = 0
        self._transitions: list[BreakerTransition] = []
        self._breaker_wait_s = 0.0
        self._suspects = (0, 0, 0)
        self._handed_over = 0
        self._retried_in_batch = 0
        self._left_batch = 0
        self._holdouts: list[tuple[str, str]] = []

    def sent(self, in_flight: int) -> None:
        self._sends += 1
        self._max_in_flight = max(self._max_in_flight, in_flight)

    def answered(self, kind: OutcomeKind, latency_s: float) -> None:
        self._outcomes[kind] += 1
        self._counts[bisect.bisect_left(LATENCY_BOUNDS_S, latency_s)] += 1
        self._latency_sum += latency_s
        self._latency_max = max(self._latency_max, latency_s)

    def followed(self) -> None:
        self._followed += 1

    def parked(self) -> None:
        self._parked += 1

    def breaker_changed(self, transition: BreakerTransition) -> None:
        self._transitions.append(transition)

    def waited_on_breaker(self, seconds: float) -> None:
        self._breaker_wait_s += seconds

    def suspects(self, suspected: int, isolations: int, convicted: int) -> None:
        self._suspects = (suspected, isolations, convicted)

    def handed_over(self) -> None:
        self._handed_over += 1

    def retried_in_batch(self) -> None:
        self._retried_in_batch += 1

    def left_batch(self) -> None:
        self._left_batch += 1

    def held_out(self, delivery_id: str, reason: str) -> None:
        if len(self._holdouts) < MAX_HOLDOUTS:
            self._holdouts.append((delivery_id, reason))

    def snapshot(self, final_limit: int) -> DispatchStats:
        latency = LatencyHistogram(
            counts=tuple(self._counts),
            count=sum(self._counts),
            sum_s=self._latency_sum,
            max_s=self._latency_max,
        )
        return DispatchStats(
            sends=self._sends,
            outcomes=dict(self._outcomes),
            followed=self._followed,
            parked=self._parked,
            latency=latency,
            max_in_flight=self._max_in_flight,
            final_limit=final_limit,
            breaker_transitions=tuple(self._transitions),
            breaker_wait_s=self._breaker_wait_s,
            suspected=self._suspects[0],
            isolations=self._suspects[1],
            convicted=self._suspects[2],
            handed_over=self._handed_over,
            retried_in_batch=self._retried_in_batch,
            left_batch=self._left_batch,
            holdouts=tuple(self._holdouts),
        )
