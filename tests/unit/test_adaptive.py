"""The AIMD concurrency limit, the default (``adaptive.latency`` off): grows while latency holds,
halves on trouble, stays in bounds; and the switch to the latency limit (test_adaptive_latency.py)
changes nothing while it is off."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.adaptive import (
    AdaptiveSettings,
    Limit,
    initial_limit,
    on_send,
    rebound,
    update,
)
from siding.errors import ConfigError
from siding.model import OutcomeKind

ON = AdaptiveSettings(enabled=True, min_in_flight=2, increase=1.0, backoff_ratio=0.5)
LATENCY = AdaptiveSettings(
    enabled=True, min_in_flight=2, increase=1.0, backoff_ratio=0.5, latency=True
)
# The overload cuts are the same under both rules (the latency limit's own tests:
# tests/unit/test_adaptive_latency.py).
BOTH_RULES = pytest.mark.parametrize("rule", [ON, LATENCY], ids=["aimd", "latency"])


def test_starts_at_the_configured_max() -> None:
    assert initial_limit(100, ON).current == 100


@BOTH_RULES
def test_backoff_cuts_multiplicatively(rule: AdaptiveSettings) -> None:
    state = update(initial_limit(100, rule), OutcomeKind.BACKOFF, 0.01, now=10.0, settings=rule)
    assert state.current == 50


@BOTH_RULES
def test_retries_cut_once_they_are_a_large_share_of_answers(rule: AdaptiveSettings) -> None:
    state = initial_limit(100, rule)
    for i in range(30):
        state = update(state, OutcomeKind.RETRY, 0.01, now=10.0 + i, settings=rule)
    assert state.current < 100


@BOTH_RULES
def test_a_few_slow_messages_do_not_shrink_the_window(rule: AdaptiveSettings) -> None:
    # Given 10 % of messages timing out (slow messages, the retry lanes' business)
    state = initial_limit(100, rule)
    for i in range(1000):
        kind = OutcomeKind.RETRY if i % 10 == 0 else OutcomeKind.ACK
        state = update(
            state, kind, 1.0 if kind is OutcomeKind.RETRY else 0.01, now=i / 100, settings=rule
        )
    # Then the window stays open
    assert state.current == 100


@BOTH_RULES
def test_one_cut_per_smoothed_latency_for_a_burst_of_failures(rule: AdaptiveSettings) -> None:
    # Given a limit that has seen latencies of 100 ms
    state = initial_limit(100, rule)
    for i in range(5):
        state = update(state, OutcomeKind.ACK, 0.1, now=float(i), settings=rule)
    # When a full window of timeouts lands within a few ms
    for i in range(100):
        state = update(state, OutcomeKind.RETRY, 0.1, now=10.0 + i / 1000, settings=rule)
    # Then the limit was cut once, not a hundred times
    assert state.current == 50
    # And a failure after the cooldown cuts again
    state = update(state, OutcomeKind.RETRY, 0.1, now=10.5, settings=rule)
    assert state.current == 25


@BOTH_RULES
def test_a_window_of_timeouts_with_no_good_answer_yet_cuts_once(rule: AdaptiveSettings) -> None:
    state = initial_limit(100, rule)
    for i in range(100):
        state = update(state, OutcomeKind.RETRY, 1.0, now=5.0 + i / 1000, settings=rule)
    assert state.current == 50


def test_grows_additively_while_latency_stays_near_its_floor() -> None:
    state = Limit(10.0, low=2, high=100)
    for i in range(5):
        state = update(state, OutcomeKind.ACK, 0.05, now=float(i), settings=ON)
    assert state.current == 15
    # DEAD is a fast, healthy answer too
    state = update(state, OutcomeKind.DEAD, 0.05, now=6.0, settings=ON)
    assert state.current == 16


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


def test_the_latency_limit_is_off_by_default() -> None:
    assert not AdaptiveSettings().latency
    assert not ON.latency


def test_off_each_window_starts_at_the_top_and_nothing_descends() -> None:
    # Given a limit a worker kept from its last batch, cut to 10
    kept = Limit(10.0, low=2, high=64, floor_s=0.02)
    # Then, off, the next batch's window starts at the top again, as main's always did
    assert rebound(kept, 64, ON).current == 64
    assert rebound(None, 64, ON) == initial_limit(64, ON)
    assert not rebound(None, 64, ON).descending
    assert not initial_limit(64, ON, descend=True).descending
    # (on, it goes on from the kept one, or descends from the top)
    assert rebound(kept, 64, LATENCY).current == 10
    assert rebound(None, 64, LATENCY).descending


def test_off_rising_latency_never_cuts_on_it_does() -> None:
    # Given a window at 40 whose consumer answered in 20 ms, then takes 200 ms for a few seconds
    def final_limit(settings: AdaptiveSettings) -> int:
        state = rebound(None, 40, settings)
        now = 0.0
        for latency in (0.02,) * 200 + (0.2,) * 400:
            now += 0.01
            state = on_send(state, state.current)
            state = update(state, OutcomeKind.ACK, latency, now, settings)
        return state.current

    # Then off, the limit stays where it was (it only stops growing); on, it comes down
    assert final_limit(ON) == 40
    assert final_limit(LATENCY) < 20


class _MainRule:
    """main's AIMD rule before the switch (9740031), written out: the reference the default
    path must match answer for answer."""

    def __init__(self, top: int, s: AdaptiveSettings) -> None:
        self.s = s
        self.low = min(s.min_in_flight, top)
        self.high = top
        self.limit = float(top)
        self.floor: float | None = None
        self.smoothed: float | None = None
        self.cut_at: float | None = None
        self.share = 0.0

    def current(self) -> int:
        return max(self.low, min(self.high, math.floor(self.limit)))

    def answer(self, kind: OutcomeKind, latency: float, now: float) -> None:
        if not self.s.enabled or kind is OutcomeKind.GONE:
            return
        latency = max(0.0, latency)
        self.smoothed = (
            latency if self.smoothed is None else self.smoothed + 0.2 * (latency - self.smoothed)
        )
        retry = kind is OutcomeKind.RETRY
        self.share += 0.05 * (float(retry) - self.share)
        over = kind is OutcomeKind.BACKOFF or (retry and self.share > self.s.retry_share_to_cut)
        if retry and not over:
            return
        if over:
            if self.cut_at is None or now - self.cut_at >= self.smoothed:
                self.limit = max(float(self.low), self.limit * self.s.backoff_ratio)
                self.cut_at = now
            return
        if self.floor is None or latency <= self.floor:
            self.floor = latency
        else:
            self.floor += 0.01 * (latency - self.floor)
        if latency <= self.s.latency_tolerance * self.floor + 0.001:
            self.limit = min(float(self.high), self.limit + self.s.increase)


# Answers near a floor of 10-40 ms (where growth starts and stops) and cuts, tightly spaced.
near_floor = st.tuples(
    st.sampled_from(
        [OutcomeKind.ACK] * 4
        + [OutcomeKind.DEAD, OutcomeKind.RETRY]
        + [OutcomeKind.BACKOFF, OutcomeKind.GONE]
    ),
    st.one_of(st.sampled_from([0.01, 0.02, 0.021, 0.03, 0.04]), st.floats(0, 0.2)),
    st.floats(min_value=0, max_value=0.05, allow_nan=False),
)


@settings(deadline=None)
@given(
    st.integers(1, 200),
    st.integers(1, 50),
    st.floats(0.05, 0.95),
    st.lists(st.one_of(answers, near_floor), max_size=300),
)
def test_off_is_mains_rule_answer_for_answer(
    max_in_flight: int,
    min_in_flight: int,
    ratio: float,
    seq: list[tuple[OutcomeKind, float, float]],
) -> None:
    # Given main's rule and the default path, from a window's start (as the worker makes it)
    off = AdaptiveSettings(min_in_flight=min_in_flight, backoff_ratio=ratio)
    state = rebound(None, max_in_flight, off)
    main = _MainRule(max_in_flight, off)
    now = 0.0
    for kind, latency, dt in seq:
        now += dt
        state = on_send(state, state.current)
        state = update(state, kind, latency, now, off)
        main.answer(kind, latency, now)
        # Then every answer leaves the same window
        assert state.current == main.current()
        assert state.limit == main.limit
