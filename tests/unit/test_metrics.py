"""The metrics fold: batches of task results into per-lane metrics (pure functions)."""

from __future__ import annotations

import threading

import pytest

from siding.dispatch import BreakerState, BreakerTransition, DispatchStats, LatencyHistogram
from siding.model import OutcomeKind
from siding.pipeline.driver.metrics import (
    LaneMetrics,
    MetricsSink,
    fold_batch,
    latest_breaker,
    merge_histograms,
    window_rate,
)
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts

N = len(LatencyHistogram().counts)


def hist(**bucket_counts: int) -> LatencyHistogram:
    """``hist(b3=2)``: two samples in bucket 3 (the 10 ms bucket)."""
    counts = [0] * N
    for name, n in bucket_counts.items():
        counts[int(name[1:])] = n
    bounds = LatencyHistogram().bounds_s
    total = sum(counts)
    sum_s = sum(bounds[min(i, len(bounds) - 1)] * n for i, n in enumerate(counts))
    top = max((bounds[min(i, len(bounds) - 1)] for i, n in enumerate(counts) if n), default=0.0)
    return LatencyHistogram(counts=tuple(counts), count=total, sum_s=sum_s, max_s=top)


def result(
    acked: int = 0,
    to_lane: int = 0,
    to_dlq: int = 0,
    *,
    latency: LatencyHistogram | None = None,
    in_flight: int = 0,
    transitions: tuple[BreakerTransition, ...] = (),
    reasons: dict[str, int] | None = None,
) -> TaskResult:
    stats = DispatchStats(
        sends=acked + to_lane + to_dlq,
        outcomes={OutcomeKind.ACK: acked, OutcomeKind.DEAD: to_dlq},
        latency=latency or LatencyHistogram(),
        max_in_flight=in_flight,
        breaker_transitions=transitions,
    )
    return TaskResult(
        counts=StepCounts(
            records=acked + to_lane + to_dlq, acked=acked, to_lane=to_lane, to_dlq=to_dlq
        ),
        stats=stats,
        dead_reasons=reasons or {},
    )


def test_merged_histogram_adds_counts_and_keeps_the_max() -> None:
    merged = merge_histograms(hist(b3=2), hist(b3=1, b9=4))
    assert merged.counts[3] == 3 and merged.counts[9] == 4
    assert merged.count == 7
    assert merged.max_s == 1.0
    assert merged.sum_s == pytest.approx(3 * 0.01 + 4 * 1.0)


def test_histograms_with_other_buckets_do_not_merge() -> None:
    other = LatencyHistogram(bounds_s=(1.0,), counts=(0, 0))
    with pytest.raises(ValueError, match="different buckets"):
        merge_histograms(LatencyHistogram(), other)


@pytest.mark.parametrize(
    ("transitions", "current", "current_at", "expected"),
    [
        ((), BreakerState.OPEN, 5.0, (BreakerState.OPEN, 5.0)),
        (
            (
                BreakerTransition(2.0, BreakerState.CLOSED, BreakerState.OPEN),
                BreakerTransition(3.0, BreakerState.OPEN, BreakerState.HALF_OPEN),
            ),
            BreakerState.CLOSED,
            None,
            (BreakerState.HALF_OPEN, 3.0),
        ),
        # An older transition (from a slower task) does not undo a newer state.
        (
            (BreakerTransition(1.0, BreakerState.CLOSED, BreakerState.OPEN),),
            BreakerState.CLOSED,
            4.0,
            (BreakerState.CLOSED, 4.0),
        ),
    ],
)
def test_breaker_state_is_the_newest_transition(
    transitions: tuple[BreakerTransition, ...],
    current: BreakerState,
    current_at: float | None,
    expected: tuple[BreakerState, float | None],
) -> None:
    assert latest_breaker(transitions, current, current_at) == expected


def test_window_rate_counts_only_recent_batches() -> None:
    recent = [(0.0, 1000), (8.0, 30), (10.0, 20)]
    assert window_rate(recent, now=10.0, window_s=5.0) == pytest.approx(10.0)


def test_fold_sums_tasks_and_batches() -> None:
    # Given two batches, the first with two tasks running side by side
    first = [
        result(acked=90, to_lane=8, to_dlq=2, latency=hist(b3=100), in_flight=60,
               reasons={"sim": 2}),
        result(acked=50, latency=hist(b3=50), in_flight=40),
    ]  # fmt: skip
    second = [result(acked=10, to_dlq=1, latency=hist(b10=11), in_flight=5, reasons={"sim": 1})]
    # When they are folded in
    metrics = fold_batch(LaneMetrics(), first, 1.5, now=100.0)
    metrics = fold_batch(metrics, second, 0.5, now=101.0)
    # Then the counts add up, in-flight is per batch and the peak is kept
    assert (
        metrics.counts.records,
        metrics.counts.acked,
        metrics.counts.to_lane,
        metrics.counts.to_dlq,
    ) == (161, 150, 8, 3)
    assert metrics.batches == 2
    assert metrics.last_in_flight == 5 and metrics.max_in_flight == 100
    assert metrics.last_batch_s == 0.5
    assert metrics.dead_reasons == {"sim": 3}
    assert metrics.outcomes[OutcomeKind.ACK] == 150
    assert metrics.latency.count == 161
    assert metrics.latency.quantile(0.5) == 0.01
    assert metrics.latency.quantile(0.99) == 2.0
    assert metrics.recent == ((100.0, 150), (101.0, 11))


def test_fold_forgets_batches_older_than_the_window() -> None:
    metrics = fold_batch(LaneMetrics(), [result(acked=5)], 0.1, now=0.0, window_s=10.0)
    metrics = fold_batch(metrics, [result(acked=7)], 0.1, now=11.0, window_s=10.0)
    assert metrics.recent == ((11.0, 7),)
    assert metrics.counts.records == 12


def test_sink_is_safe_across_threads_and_reports_rates() -> None:
    # Given a sink with a fixed clock 20 s after start
    now = [0.0]
    sink = MetricsSink(clock=lambda: now[0], window_s=10.0)
    sink.declare("billing", 3)
    now[0] = 20.0

    # When eight threads each report 100 one-record batches on lane 0
    def report() -> None:
        for _ in range(100):
            sink.sink.on_result("billing", 0, [result(acked=1)], 0.01)

    threads = [threading.Thread(target=report) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = sink.snapshot()
    # Then nothing was lost and the rate is records over the window
    assert snap.lanes[("billing", 0)].counts.acked == 800
    assert snap.rate(("billing", 0)) == pytest.approx(80.0)
    assert snap.lanes[("billing", 2)] == LaneMetrics()
    assert snap.routes() == ["billing"]
    assert snap.rate(("other", 0)) == 0.0
