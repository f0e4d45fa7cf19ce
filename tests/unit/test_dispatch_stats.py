"""Dispatch statistics and settings validation."""

from __future__ import annotations

from typing import Any

import pytest

from siding.dispatch import DispatchSettings
from siding.dispatch.breaker import BreakerState, BreakerTransition
from siding.dispatch.stats import LATENCY_BOUNDS_S, LatencyHistogram, StatsRecorder
from siding.errors import ConfigError
from siding.model import Lane, OutcomeKind


def test_recorder_counts_kinds_buckets_latency_and_keeps_the_peak() -> None:
    recorder = StatsRecorder()
    for in_flight in (1, 2, 3, 2):
        recorder.sent(in_flight)
    recorder.answered(OutcomeKind.ACK, 0.004)
    recorder.answered(OutcomeKind.ACK, 0.05)
    recorder.answered(OutcomeKind.RETRY, 120.0)
    recorder.followed()
    change = BreakerTransition(1.0, BreakerState.CLOSED, BreakerState.OPEN)
    recorder.breaker_changed(change)
    recorder.waited_on_breaker(0.25)
    recorder.waited_on_breaker(0.5)
    stats = recorder.snapshot(final_limit=7)
    assert stats.sends == 4
    assert stats.max_in_flight == 3
    assert stats.outcomes == {OutcomeKind.ACK: 2, OutcomeKind.RETRY: 1}
    assert stats.followed == 1
    assert stats.final_limit == 7
    assert stats.breaker_transitions == (change,)
    assert stats.breaker_wait_s == pytest.approx(0.75)
    hist = stats.latency
    assert hist.count == 3
    assert hist.counts[LATENCY_BOUNDS_S.index(0.005)] == 1
    assert hist.counts[LATENCY_BOUNDS_S.index(0.05)] == 1  # a bound belongs to its own bucket
    assert hist.counts[-1] == 1  # above every bound
    assert hist.max_s == 120.0
    assert hist.sum_s == pytest.approx(120.054)


def test_quantile_is_the_bound_of_the_bucket_holding_it() -> None:
    recorder = StatsRecorder()
    for _ in range(9):
        recorder.answered(OutcomeKind.ACK, 0.015)
    recorder.answered(OutcomeKind.ACK, 3.0)
    hist = recorder.snapshot(1).latency
    assert hist.quantile(0.5) == 0.02
    assert hist.quantile(0.9) == 0.02
    assert hist.quantile(1.0) == 3.0  # the bucket bound is 5 s, but nothing took that long
    assert LatencyHistogram().quantile(0.5) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"lane": 1}, "lane"),
        ({"lane": 2, "lanes": (Lane(1, 1),)}, "lane"),
        ({"max_retry_after_s": -1}, "max_retry_after_s"),
        ({"rate_limit": -1}, "rate_limit"),
    ],
)
def test_bad_settings_name_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        DispatchSettings(**kwargs)
    assert caught.value.key == key
