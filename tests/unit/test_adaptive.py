"""The adaptive limit: follows the latency towards twice its baseline, cuts on trouble, ramps up
from the floor, stays in bounds."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.adaptive import (
    MIN_SAMPLES,
    AdaptiveSettings,
    Limit,
    initial_limit,
    update,
)
from siding.errors import ConfigError
from siding.model import OutcomeKind

ON = AdaptiveSettings(enabled=True, min_in_flight=2, increase=1.0, backoff_ratio=0.5)


def test_starts_at_the_configured_max() -> None:
    assert initial_limit(100, ON).current == 100


def test_backoff_cuts_multiplicatively() -> None:
    state = update(initial_limit(100, ON), OutcomeKind.BACKOFF, 0.01, now=10.0, settings=ON)
    assert state.current == 50


def test_retries_cut_once_they_are_a_large_share_of_answers() -> None:
    state = initial_limit(100, ON)
    for i in range(30):
        state = update(state, OutcomeKind.RETRY, 0.01, now=10.0 + i, settings=ON)
    assert state.current < 100


def test_a_few_slow_messages_do_not_shrink_the_window() -> None:
    # Given 10 % of messages timing out (slow messages, the retry lanes' business)
    state = initial_limit(100, ON)
    for i in range(1000):
        kind = OutcomeKind.RETRY if i % 10 == 0 else OutcomeKind.ACK
        state = update(
            state, kind, 1.0 if kind is OutcomeKind.RETRY else 0.01, now=i / 100, settings=ON
        )
    # Then the window stays open
    assert state.current == 100


def test_one_cut_per_smoothed_latency_for_a_burst_of_failures() -> None:
    # Given a limit that has seen latencies of 100 ms
    state = initial_limit(100, ON)
    for i in range(5):
        state = update(state, OutcomeKind.ACK, 0.1, now=float(i), settings=ON)
    # When a full window of timeouts lands within a few ms
    for i in range(100):
        state = update(state, OutcomeKind.RETRY, 0.1, now=10.0 + i / 1000, settings=ON)
    # Then the limit was cut once, not a hundred times
    assert state.current == 50
    # And a failure after the cooldown cuts again
    state = update(state, OutcomeKind.RETRY, 0.1, now=10.5, settings=ON)
    assert state.current == 25


def test_a_window_of_timeouts_with_no_good_answer_yet_cuts_once() -> None:
    state = initial_limit(100, ON)
    for i in range(100):
        state = update(state, OutcomeKind.RETRY, 1.0, now=5.0 + i / 1000, settings=ON)
    assert state.current == 50


def window(state: Limit, latency_s: float, now: float, n: int = MIN_SAMPLES) -> Limit:
    """``n`` ACKs of ``latency_s`` each, received over one latency from ``now``: one sample
    window."""
    for i in range(n):
        at = now + 1.01 * latency_s * i / (n - 1)
        state = update(state, OutcomeKind.ACK, latency_s, now=at, settings=ON)
    return state


def test_grows_by_the_root_of_the_limit_each_window_the_latency_holds() -> None:
    state = Limit(16.0, low=2, high=100, ramping=False)
    state = window(state, 0.05, now=0.0)
    assert state.current == 20
    # DEAD is a fast, healthy answer too; a window lasts at least one latency
    for i in range(MIN_SAMPLES):
        state = update(state, OutcomeKind.DEAD, 0.05, now=1.0 + i / 1000, settings=ON)
    assert state.current == 20
    state = update(state, OutcomeKind.DEAD, 0.05, now=1.1, settings=ON)
    assert state.current == 24


def test_a_window_slower_than_twice_the_baseline_cuts_by_the_excess() -> None:
    # Given a baseline of 50 ms at a limit of 60
    state = window(Limit(60.0, low=2, high=100, ramping=False), 0.05, now=0.0)
    grown = state.limit
    # When a window's median is 150 ms (target 2 x 50 ms + 1 ms = 101 ms)
    state = window(state, 0.15, now=1.0)
    # Then the limit is cut by 101/150, not halved, and the baseline stays
    assert state.limit == pytest.approx(grown * 0.101 / 0.15)
    assert state.floor_s == 0.05
    # And a latency ten times the target cuts by half at most
    before = state.limit
    assert window(state, 5.0, now=2.0).limit == pytest.approx(before / 2)


def test_slow_messages_below_half_of_the_answers_do_not_cut() -> None:
    # Given 3 in 10 answers taking 2 s (slow messages, the lanes' business), the rest 20 ms
    state = Limit(50.0, low=1, high=100, ramping=False)
    for i in range(400):
        latency = 2.0 if i % 10 < 3 else 0.02
        state = update(state, OutcomeKind.ACK, latency, now=i / 100, settings=ON)
    # Then the window's median is a fast answer: the limit grew to the top
    assert state.current == 100


def test_the_ramp_doubles_from_the_floor_until_the_latency_rises() -> None:
    state = initial_limit(1000, ON, ramp=True)
    assert state.current == 2
    sizes = []
    for i in range(6):
        state = window(state, 0.01, now=float(i))
        sizes.append(state.current)
    assert sizes == [4, 8, 16, 32, 64, 128]
    # the first window above the target ends the ramp: growth is by the root afterwards
    state = window(state, 0.05, now=10.0)
    assert not state.ramping
    cut = state.limit
    state = window(state, 0.01, now=11.0)
    assert state.limit == cut  # a window lasts at least the last one's median (50 ms)
    state = window(state, 0.01, now=12.0)
    assert state.limit == pytest.approx(cut + math.sqrt(cut))


def test_at_the_floor_a_slower_consumer_becomes_the_new_baseline() -> None:
    # Given a limit at its floor and a consumer that got five times slower for good
    state = window(Limit(2.0, low=2, high=100, ramping=False), 0.01, now=0.0)
    state = replace(state, limit=2.0)
    state = window(state, 0.05, now=1.0)
    # Then the baseline follows (sending less cannot help), and the limit may grow again
    assert state.floor_s == pytest.approx(0.0245)
    state = window(state, 0.05, now=2.0)
    assert state.limit > 2


@settings(deadline=None, max_examples=60)
@given(
    base_s=st.floats(0.005, 0.2),
    knee=st.integers(4, 100),
    headroom=st.integers(5, 20),
    min_in_flight=st.integers(1, 3),
)
def test_settles_near_the_consumers_knee_not_at_max_in_flight(
    base_s: float, knee: int, headroom: int, min_in_flight: int
) -> None:
    # Given a consumer whose latency grows with the calls it holds: base + k x open calls, so
    # that its latency doubles at `knee` calls; max_in_flight far above the knee
    k = base_s / knee
    limits = AdaptiveSettings(min_in_flight=min_in_flight)
    state = initial_limit(knee * headroom, limits, ramp=True)
    now, seen = 0.0, []
    # When rounds of `limit` calls run, each answered after base + k x limit
    for _ in range(400):
        latency = base_s + k * state.current
        now += latency
        for _ in range(state.current):
            state = update(state, OutcomeKind.ACK, latency, now=now, settings=limits)
        seen.append(state.current)
    # Then the limit stays within half and twice the calls at which the latency is twice the
    # baseline (measured at the floor: base + k x min_in_flight; + the timer's slack): the knee,
    # plus twice the floor
    settled = knee + 2 * min_in_flight + 0.001 / k
    assert all(settled / 2 <= n <= 2 * settled for n in seen[200:]), (settled, seen[200:])
    assert max(seen[200:]) < knee * headroom


def test_does_not_grow_when_latency_rises_above_the_floor() -> None:
    state = Limit(10.0, low=2, high=100)
    state = update(state, OutcomeKind.ACK, 0.05, now=0.0, settings=ON)
    grown = state.current
    for i in range(5):
        state = update(state, OutcomeKind.ACK, 0.5, now=1.0 + i, settings=ON)
    assert state.current == grown


def test_never_below_min_nor_above_max() -> None:
    low = Limit(2.0, low=2, high=4)
    assert update(low, OutcomeKind.BACKOFF, 0.0, now=0.0, settings=ON).current == 2
    high = Limit(4.0, low=2, high=4)
    assert update(high, OutcomeKind.ACK, 0.0, now=0.0, settings=ON).current == 4


def test_disabled_keeps_max_in_flight() -> None:
    off = AdaptiveSettings(enabled=False)
    state = initial_limit(64, off)
    for kind in (OutcomeKind.RETRY, OutcomeKind.BACKOFF, OutcomeKind.ACK):
        state = update(state, kind, 3.0, now=0.0, settings=off)
    assert state.current == 64


def test_min_above_max_is_clamped_to_max() -> None:
    assert initial_limit(3, AdaptiveSettings(min_in_flight=10)).low == 3


answers = st.tuples(
    st.sampled_from(list(OutcomeKind)),
    st.floats(min_value=0, max_value=60, allow_nan=False),
    st.floats(min_value=0, max_value=5, allow_nan=False),
)


@settings(deadline=None)
@given(
    st.integers(1, 1000),
    st.integers(1, 50),
    st.floats(0.05, 0.95),
    st.floats(0.1, 10),
    st.lists(answers, max_size=200),
)
def test_limit_stays_within_bounds(
    max_in_flight: int,
    min_in_flight: int,
    ratio: float,
    increase: float,
    seq: list[tuple[OutcomeKind, float, float]],
) -> None:
    aimd = AdaptiveSettings(min_in_flight=min_in_flight, increase=increase, backoff_ratio=ratio)
    state = initial_limit(max_in_flight, aimd)
    now = 0.0
    for kind, latency, dt in seq:
        now += dt
        state = update(state, kind, latency, now, aimd)
        assert min(min_in_flight, max_in_flight) <= state.current <= max_in_flight
        assert state.limit <= max_in_flight


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"min_in_flight": 0}, "adaptive.min_in_flight"),
        ({"increase": 0}, "adaptive.increase"),
        ({"backoff_ratio": 1.0}, "adaptive.backoff_ratio"),
        ({"latency_tolerance": 0.5}, "adaptive.latency_tolerance"),
    ],
)
def test_bad_settings_name_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AdaptiveSettings(**kwargs)
    assert caught.value.key == key
