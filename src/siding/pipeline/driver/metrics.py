"""Batch results folded into per-(route, lane) metrics on the driver: status, Prometheus, demo.

The fold is a set of pure functions; ``MetricsSink`` only adds a lock and a clock around them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from siding.dispatch import BreakerState, BreakerTransition, DispatchStats, LatencyHistogram
from siding.model import OutcomeKind
from siding.pipeline.driver.batch import BatchSink
from siding.pipeline.driver.batchlog import breaker_changes
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts

RATE_WINDOW_S = 10.0
MAX_RECENT_HOLDOUTS = 10
MAX_BREAKER_HISTORY = 10

LaneKey = tuple[str, int]
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class LaneMetrics:
    """Everything known about one lane of one route, summed since start."""

    counts: StepCounts = field(default_factory=StepCounts)
    batches: int = 0
    sends: int = 0
    outcomes: Mapping[OutcomeKind, int] = field(default_factory=dict)
    dead_reasons: Mapping[str, int] = field(default_factory=dict)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    last_batch_s: float = 0.0
    last_in_flight: int = 0
    max_in_flight: int = 0
    breaker: BreakerState = BreakerState.CLOSED
    breaker_changed_at: float | None = None
    # The latest transitions, oldest first: (epoch s, before, after, "host pid").
    breaker_history: tuple[tuple[float, str, str, str], ...] = ()
    # Suspects (docs/dispatch.md): messages out when the consumer went away, suspect sends, and
    # the ones dead-lettered because the consumer died on them; holdouts: messages moved on
    # after being turned away for a whole deadline, with the latest (id, reason).
    suspected: int = 0
    isolations: int = 0
    convicted: int = 0
    spans_dropped: int = 0  # [tracing]: spans the workers could not export
    holdouts: int = 0
    recent_holdouts: tuple[tuple[str, str], ...] = ()
    # (monotonic time, records settled) per batch, oldest first, within the rate window.
    recent: tuple[tuple[float, int], ...] = ()


def merge_histograms(a: LatencyHistogram, b: LatencyHistogram) -> LatencyHistogram:
    """The histogram of both samples (same fixed buckets)."""
    if a.bounds_s != b.bounds_s:
        raise ValueError("cannot merge latency histograms with different buckets")
    return LatencyHistogram(
        bounds_s=a.bounds_s,
        counts=tuple(x + y for x, y in zip(a.counts, b.counts, strict=True)),
        count=a.count + b.count,
        sum_s=a.sum_s + b.sum_s,
        max_s=max(a.max_s, b.max_s),
    )


def merge_counts(a: Mapping[K, int], b: Mapping[K, int]) -> dict[K, int]:
    merged: Counter[K] = Counter(a)
    merged.update(b)
    return dict(merged)


def latest_breaker(
    transitions: Iterable[BreakerTransition], current: BreakerState, current_at: float | None
) -> tuple[BreakerState, float | None]:
    """The state after the newest transition that is newer than what we know."""
    newest = max(transitions, key=lambda t: t.at, default=None)
    if newest is None or (current_at is not None and newest.at < current_at):
        return current, current_at
    return newest.after, newest.at


def window_rate(recent: Iterable[tuple[float, int]], now: float, window_s: float) -> float:
    """Records per second over the last ``window_s`` seconds."""
    settled = sum(n for at, n in recent if now - at <= window_s)
    return settled / window_s


def fold_batch(
    current: LaneMetrics,
    results: Iterable[TaskResult],
    seconds: float,
    now: float,
    window_s: float = RATE_WINDOW_S,
) -> LaneMetrics:
    """``current`` plus one batch of task results."""
    results = list(results)
    stats = [r.stats for r in results if r.stats is not None]
    latency = current.latency
    for s in stats:
        latency = merge_histograms(latency, s.latency)
    outcomes: dict[OutcomeKind, int] = dict(current.outcomes)
    reasons: dict[str, int] = dict(current.dead_reasons)
    for r in results:
        reasons = merge_counts(reasons, r.dead_reasons)
    for s in stats:
        outcomes = merge_counts(outcomes, s.outcomes)
    breaker, changed_at = latest_breaker(
        (t for s in stats for t in s.breaker_transitions),
        current.breaker,
        current.breaker_changed_at,
    )
    history = (
        *current.breaker_history,
        *(
            (
                c.transition.wall,
                c.transition.before.value,
                c.transition.after.value,
                f"{c.host} pid {c.pid}",
            )
            for c in sorted(breaker_changes(results), key=lambda c: c.transition.wall)
        ),
    )[-MAX_BREAKER_HISTORY:]
    counts = StepCounts.total(r.counts for r in results)
    settled = counts.records
    # Tasks of one batch run at the same time, so their windows add up.
    in_flight = _batch_in_flight(stats)
    recent = tuple(p for p in (*current.recent, (now, settled)) if now - p[0] <= window_s)
    return replace(
        current,
        counts=current.counts + counts,
        batches=current.batches + 1,
        sends=current.sends + sum(s.sends for s in stats),
        outcomes=outcomes,
        dead_reasons=reasons,
        latency=latency,
        last_batch_s=seconds,
        last_in_flight=in_flight,
        max_in_flight=max(current.max_in_flight, in_flight),
        breaker=breaker,
        breaker_changed_at=changed_at,
        breaker_history=history,
        recent=recent,
        suspected=current.suspected + sum(s.suspected for s in stats),
        isolations=current.isolations + sum(s.isolations for s in stats),
        convicted=current.convicted + sum(s.convicted for s in stats),
        spans_dropped=current.spans_dropped + sum(r.spans_dropped for r in results),
        holdouts=current.holdouts + sum(len(s.holdouts) for s in stats),
        recent_holdouts=(*current.recent_holdouts, *(h for s in stats for h in s.holdouts))[
            -MAX_RECENT_HOLDOUTS:
        ],
    )


def _batch_in_flight(stats: Iterable[DispatchStats]) -> int:
    return sum(s.max_in_flight for s in stats)


@dataclass(frozen=True, slots=True)
class PageTally:
    """A route's DLQ pages (docs/dlq.md): sent and dropped, and the letters they counted."""

    sent: int = 0
    dropped: int = 0
    letters_sent: int = 0
    letters_dropped: int = 0


def count_page(tally: PageTally, *, sent: bool, letters: int) -> PageTally:
    if sent:
        return replace(tally, sent=tally.sent + 1, letters_sent=tally.letters_sent + letters)
    return replace(
        tally, dropped=tally.dropped + 1, letters_dropped=tally.letters_dropped + letters
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of every lane's metrics, taken at ``at`` (monotonic)."""

    lanes: Mapping[LaneKey, LaneMetrics]
    at: float
    started_at: float
    last_error: str | None = None
    # Per route with a pager ([route.dlq_page]).
    pages: Mapping[str, PageTally] = field(default_factory=dict)

    def rate(self, key: LaneKey, window_s: float = RATE_WINDOW_S) -> float:
        lane = self.lanes.get(key)
        if lane is None:
            return 0.0
        return window_rate(lane.recent, self.at, min(window_s, max(self.at - self.started_at, 1.0)))

    def routes(self) -> list[str]:
        return sorted({route for route, _ in self.lanes})


class MetricsSink:
    """Thread-safe aggregation of batch results; hand ``sink`` to the ``Application``."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = RATE_WINDOW_S,
    ) -> None:
        self._clock = clock
        self._window_s = window_s
        self._lock = threading.Lock()
        self._lanes: dict[LaneKey, LaneMetrics] = {}
        self._started_at = clock()
        self._last_error: str | None = None
        self._pages: dict[str, PageTally] = {}
        self.sink = BatchSink(self.on_result, self.on_page)

    def declare(self, route: str, lanes: int, *, pages: bool = False) -> None:
        """Show a route's lanes (zeros) before their first batch, and its DLQ pages (zeros)
        before its first page when it pages (an alert on a rate needs the series first)."""
        with self._lock:
            for lane in range(lanes):
                self._lanes.setdefault((route, lane), LaneMetrics())
            if pages:
                self._pages.setdefault(route, PageTally())

    def on_result(self, route: str, lane: int, results: list[TaskResult], seconds: float) -> None:
        with self._lock:
            key = (route, lane)
            current = self._lanes.get(key, LaneMetrics())
            self._lanes[key] = fold_batch(current, results, seconds, self._clock(), self._window_s)

    def on_page(self, route: str, sent: bool, letters: int) -> None:
        with self._lock:
            tally = self._pages.get(route, PageTally())
            self._pages[route] = count_page(tally, sent=sent, letters=letters)

    def error(self, text: str) -> None:
        """Remember the last error (a failed route, a stopped query) for ``/status``."""
        with self._lock:
            self._last_error = text

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                dict(self._lanes),
                self._clock(),
                self._started_at,
                self._last_error,
                dict(self._pages),
            )
