"""The adaptive concurrency limit: a gradient on the consumer's fast answers' latency, cuts on
BACKOFF and on many RETRYs, and stays in bounds (docs/dispatch.md, "Adaptive concurrency")."""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.adaptive import (
    MIN_SAMPLES,
    RAMP_SAMPLES,
    RAMP_STALL_S,
    AdaptiveSettings,
    Limit,
    initial_limit,
    percentile,
    ramp_if_stalled,
    rebound,
    update,
)
from siding.errors import ConfigError
from siding.model import OutcomeKind

ON = AdaptiveSettings(enabled=True, min_in_flight=2, increase=1.0, backoff_ratio=0.5)
ACK = OutcomeKind.ACK

# (calls open at the consumer with this one, a random source, now) -> (seconds it takes, answer)
Consumer = Callable[[int, random.Random, float], tuple[float, OutcomeKind]]


def run_consumer(
    consumer: Consumer,
    *,
    seconds: float,
    max_in_flight: int = 64,
    adaptive: AdaptiveSettings = ON,
    seed: int = 1,
    ramp: bool = True,
    burst: bool = False,
) -> list[tuple[float, int]]:
    """A backlog sent to ``consumer`` under the limit (a new call whenever a slot is free), as
    the window does; (answer time, limit after it) for every answer. ``ramp``: the limit starts
    at the floor and ramps up, as a route's window does; else at the top. ``burst``: the calls
    sent at once all find each other open (as through a real transport, where a burst arrives
    before the consumer answers any of it); else each finds only those sent before it."""
    rnd = random.Random(seed)
    state = initial_limit(max_in_flight, adaptive, ramp=ramp)
    now = 0.0
    out: list[tuple[float, float, OutcomeKind]] = []  # (answer at, took, answer)
    trace: list[tuple[float, int]] = []
    while now < seconds:
        sending = max(0, state.current - len(out))
        for i in range(sending):
            took, kind = consumer(len(out) + (sending - i if burst else 1), rnd, now)
            heapq.heappush(out, (now + took, took, kind))
        state, ramp_in = ramp_if_stalled(state, now)
        if len(out) < state.current:
            continue
        if ramp_in is not None and now + ramp_in < out[0][0]:
            now += ramp_in
            continue
        now, took, kind = heapq.heappop(out)
        state = update(state, kind, took, now, adaptive)
        trace.append((now, state.current))
    return trace


def after(trace: list[tuple[float, int]], t: float) -> list[int]:
    return [limit for at, limit in trace if at >= t]


def knee_consumer(base_s: float, k_s: float, knee: int) -> Consumer:
    """A queueing consumer: ``base_s`` up to ``knee`` calls open, ``k_s`` more per call above."""

    def took(open_calls: int, _rnd: random.Random, _now: float) -> tuple[float, OutcomeKind]:
        return base_s + k_s * max(0, open_calls - knee), ACK

    return took


def window(state: Limit, latency_s: float, now: float, n: int = MIN_SAMPLES) -> Limit:
    """``n`` answers of ``latency_s`` from ``now``, 10 ms apart: one sample window."""
    for i in range(n):
        state = update(state, ACK, latency_s, now + i * 0.01, ON)
    return state


def test_a_dispatch_that_keeps_no_limit_starts_at_the_max() -> None:
    assert initial_limit(100, ON).current == 100
    assert not initial_limit(100, ON).ramping


def test_a_fresh_limit_starts_at_the_floor_and_doubles_each_round_trip() -> None:
    # Given a fresh limit (floor 2) and a consumer that answers every call in 20 ms
    state = initial_limit(100, ON, ramp=True)
    assert (state.current, state.ramping) == (2, True)
    # When each round trip's calls are answered
    sizes = []
    now = 0.0
    for _ in range(4):
        now += 0.02
        for _ in range(state.current):
            state = update(state, ACK, 0.02, now, ON)
        sizes.append(state.current)
    # Then the limit doubles each round: a fast consumer's first batch is not held back
    assert sizes == [4, 8, 16, 32]
    # And the baseline is the unloaded answers' latency
    assert state.baseline_s == 0.02


def test_the_ramp_ends_when_a_rounds_answers_rise_above_the_target() -> None:
    # Given a ramp that measured a baseline of 20 ms and has reached 40, at the start of a round
    state = initial_limit(100, ON, ramp=True)
    for i in range(RAMP_SAMPLES):
        state = update(state, ACK, 0.02, now=0.02 + i / 1000, settings=ON)
    while state.current < 40 or state.samples:
        state = update(state, ACK, 0.02, now=0.1, settings=ON)
    assert state.ramping and state.baseline_s == 0.02
    started = state.round_from
    # When a round's fast answers take 82 ms (twice the target of 41 ms)
    for i in range(RAMP_SAMPLES):
        state = update(state, ACK, 0.082, now=0.2 + i / 1000, settings=ON)
    # Then the ramp ends, cut from where the round began, and the baseline stays the unloaded one
    assert not state.ramping
    assert state.limit == pytest.approx(started / 2)
    assert state.baseline_s == 0.02


def test_the_ramp_grows_on_retries_too() -> None:
    # A consumer that answers RETRY to a share below the cut: the ramp must not wait for ACKs
    state = initial_limit(64, ON, ramp=True)
    for i in range(40):
        kind = OutcomeKind.RETRY if i % 5 == 0 else ACK
        state = update(state, kind, 0.01, now=i / 100, settings=ON)
    assert state.current == 42


def test_a_ramp_doubles_at_least_every_stall_time() -> None:
    # A consumer that holds every call for 20 s: the ramp must not wait 20 s per doubling (its
    # calls would block the batch's other records, head-of-line, until the first answers)
    state = initial_limit(16, ON, ramp=True)
    state, due = ramp_if_stalled(state, now=0.0)
    assert (state.current, due) == (2, RAMP_STALL_S)
    state, due = ramp_if_stalled(state, now=0.5 * RAMP_STALL_S)
    assert state.current == 2 and due == pytest.approx(RAMP_STALL_S / 2)
    sizes = []
    for i in range(1, 5):
        state, _ = ramp_if_stalled(state, now=i * RAMP_STALL_S)
        sizes.append(state.current)
    assert sizes == [4, 8, 16, 16]  # never above max_in_flight
    # Answers that trickle in do not hold it back: it doubles from its last doubling
    state = initial_limit(16, ON, ramp=True)
    state, _ = ramp_if_stalled(state, now=0.0)
    state = update(state, ACK, 0.5, now=0.5 * RAMP_STALL_S, settings=ON)
    assert state.current == 3
    state, _ = ramp_if_stalled(state, now=RAMP_STALL_S)
    assert state.current == 4
    # And answers that doubled it are its last doubling
    for _ in range(4):
        state = update(state, ACK, 0.01, now=1.2 * RAMP_STALL_S, settings=ON)
    state, due = ramp_if_stalled(state, now=2.1 * RAMP_STALL_S)
    assert state.current == 8 and due == pytest.approx(0.1 * RAMP_STALL_S)


def test_a_limit_that_does_not_ramp_never_grows_by_time() -> None:
    ended = Limit(8.0, low=2, high=16, baseline_s=0.02)
    assert ramp_if_stalled(ended, now=100.0) == (ended, None)
    assert ramp_if_stalled(initial_limit(16, ON), now=100.0)[1] is None  # at the top


def test_rising_latency_cuts_the_limit() -> None:
    # Given a limit of 40 whose consumer answered in 20 ms unloaded
    state = Limit(40.0, low=2, high=64, baseline_s=0.02)
    # When the fast answers take 80 ms (four times the baseline, twice the target)
    state = window(state, 0.08, now=1.0)
    # Then the limit is cut in proportion (41 ms / 80 ms), not to the floor
    assert state.current == 20


def test_falling_latency_grows_the_limit() -> None:
    # Given a limit cut to 10 while the consumer was slow
    state = window(Limit(20.0, low=2, high=64, baseline_s=0.02), 0.08, now=1.0)
    cut = state.current
    assert cut == 10
    # When the answers are fast again, window after window
    for i in range(5):
        state = window(state, 0.02, now=2.0 + i)
    # Then it grows (by about sqrt(limit) a window)
    assert state.current >= cut + 5


def test_latency_at_the_target_holds_the_limit() -> None:
    state = Limit(10.0, low=2, high=64, baseline_s=0.02)
    for i in range(5):
        state = window(state, 0.041, now=1.0 + i)
    assert state.current == 10


def test_never_below_min_nor_above_max() -> None:
    low = Limit(2.0, low=2, high=4)
    assert update(low, OutcomeKind.BACKOFF, 0.0, now=0.0, settings=ON).current == 2
    slow = window(window(low, 0.01, now=0.0), 5.0, now=1.0)
    assert slow.current == 2
    high = Limit(4.0, low=2, high=4)
    assert window(high, 0.001, now=0.0).current == 4


@pytest.mark.parametrize("burst", [False, True])
def test_the_limit_settles_at_a_queueing_consumers_knee(burst: bool) -> None:
    # Given a consumer that answers in 20 ms up to 8 calls and takes 10 ms more per call above
    # (the target, twice 20 ms, is reached at 10 calls) and a backlog under max_in_flight = 64,
    # its calls sent at once arriving one by one, or all before it answers any (``burst``)
    trace = run_consumer(knee_consumer(0.02, 0.01, knee=8), seconds=30.0, burst=burst)
    # Then the ramp overshoots the knee at most once, and within a second
    assert max(after(trace, 1.0)) <= 16
    # And after a few seconds the limit stays between the knee and the target
    settled = after(trace, 5.0)
    assert min(settled) >= 8
    assert max(settled) <= 12
    assert statistics.median(settled) in (9, 10, 11)


def test_a_limit_that_starts_at_the_top_misses_the_knee_of_a_burst() -> None:
    # Why the ramp: started at the top, the first answers of a burst are already slow (all 64
    # calls are open at the consumer before it answers one), so the baseline is a loaded
    # latency and the limit never comes down (a real route held 63 of 64 calls so)
    trace = run_consumer(knee_consumer(0.02, 0.01, knee=8), seconds=10.0, burst=True, ramp=False)
    assert statistics.median(after(trace, 5.0)) == 64


def test_noise_does_not_flap_the_limit() -> None:
    # Given a consumer that is not loaded at all, but whose latency is noisy (exponential around
    # 50 ms, or log-normal around 20 ms with sigma 1: answers from under 1 ms to over 200 ms)
    for noisy in (
        lambda _n, rnd, _t: (rnd.expovariate(20), ACK),
        lambda _n, rnd, _t: (0.02 * rnd.lognormvariate(0, 1.0), ACK),
    ):
        trace = run_consumer(noisy, seconds=20.0)
        limits = after(trace, 1.0)
        # Then the ramp reached the top and the window stays open: at most a small cut
        assert min(limits) >= 48
        assert statistics.median(limits) == 64


def test_a_consumer_that_got_slower_for_good_is_not_pinned_at_the_floor() -> None:
    # Given the knee consumer, which becomes ten times slower for good after 10 s (200 ms up to
    # 8 calls): every latency is above the old target, even at the floor
    def slower(open_calls: int, _rnd: random.Random, now: float) -> tuple[float, OutcomeKind]:
        base = 0.02 if now < 10 else 0.2
        return base + 0.01 * max(0, open_calls - 8), ACK

    trace = run_consumer(slower, seconds=60.0)
    # Then the limit came down, and found the new consumer's own target (200 ms x 2 at 28 calls)
    settled = after(trace, 40.0)
    assert 24 <= statistics.median(settled) <= 30
    assert min(settled) > ON.min_in_flight


@pytest.mark.parametrize("slow_share", [0.1, 0.4])
def test_slow_messages_do_not_cut_the_window_of_the_fast_ones(slow_share: float) -> None:
    # Given the HOL workload: most messages answered in 10 ms, some taking 2 s each (slow
    # messages, not a loaded consumer: the fast ones stay fast)
    def hol(_n: int, rnd: random.Random, _t: float) -> tuple[float, OutcomeKind]:
        return (2.0 if rnd.random() < slow_share else 0.01), ACK

    trace = run_consumer(hol, seconds=30.0)
    # Then the ramp reaches the top within a second and the window is never cut: the fast
    # answers say the consumer is not saturated
    assert min(after(trace, 1.0)) == 64


def test_a_window_judges_by_its_fast_answers() -> None:
    samples = (0.01,) * 15 + (2.0,) * 5
    assert percentile(samples, 0.25) == 0.01
    assert percentile((0.3,), 0.25) == 0.3


def test_backoff_cuts_multiplicatively() -> None:
    state = update(initial_limit(100, ON), OutcomeKind.BACKOFF, 0.01, now=10.0, settings=ON)
    assert state.current == 50


def test_retries_cut_once_they_are_a_large_share_of_answers() -> None:
    state = initial_limit(100, ON)
    for i in range(30):
        state = update(state, OutcomeKind.RETRY, 0.01, now=10.0 + i, settings=ON)
    assert state.current < 100


def test_a_few_timeouts_do_not_shrink_the_window() -> None:
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


def test_an_overload_cut_grows_back_by_one_per_good_answer() -> None:
    # Given a limit that holds its latency target at 40, halved by a BACKOFF
    state = update(Limit(40.0, low=2, high=64, baseline_s=0.02), OutcomeKind.BACKOFF, 0.0, 0.0, ON)
    assert state.current == 20
    # When ten good answers come (fewer than a sample window)
    for i in range(10):
        state = update(state, ACK, 0.02, now=1.0 + i * 0.01, settings=ON)
    # Then the cut grew back by one each, and the latency's limit was never touched
    assert state.current == 30
    assert state.limit == 40.0


def test_an_outage_during_the_ramp_is_the_breakers_business() -> None:
    # Given a fresh window ramping up to 400 calls of a consumer that answers in 0.5 s, killed
    # mid-ramp (0.85 s in) and back 12 s later, as in tests/e2e/test_poison_pills.py's outage
    settings = AdaptiveSettings(enabled=True, min_in_flight=1)
    state = initial_limit(400, settings, ramp=True)
    kill_at, back_at, took = 0.85, 12.85, 0.5
    now = 0.0
    out: list[float] = []  # send times of the calls out, oldest first
    while now < kill_at:
        out += [now] * max(0, state.current - len(out))
        state, ramp_in = ramp_if_stalled(state, now)
        if len(out) < state.current:
            continue
        due = out[0] + took
        if ramp_in is not None and now + ramp_in < due:
            now += ramp_in
            continue
        if due >= kill_at:
            break
        now = due
        state = update(state, ACK, now - out.pop(0), now, settings)
    before = state
    assert before.ramping and before.baseline_s == pytest.approx(took)
    assert 200 <= len(out) < 400  # killed with at least 200 calls out, the rest not sent yet
    # When every call out comes back lost at once (BACKOFF, each with its own latency), and the
    # breaker holds every send until the consumer is back
    for sent in out:
        state = update(state, OutcomeKind.BACKOFF, kill_at - sent, kill_at, settings)
    # Then none of them is a latency sample, the baseline is the one measured before, the
    # latency's limit is not cut, and the overload cut halved the window once
    assert (state.baseline_s, state.samples, state.limit) == (before.baseline_s, (), before.limit)
    assert state.current == before.current // 2
    # And once the consumer is back the window regains its size within one round trip and
    # reaches max_in_flight in the next (the ramp goes on from where the outage found it)
    sizes: dict[int, int] = {}
    now, out = back_at, []
    while now < back_at + 2 * took + 0.01:
        out += [now] * max(0, state.current - len(out))
        now = out[0] + took
        while out and out[0] + took <= now:
            state = update(state, ACK, took, now, settings)
            out.pop(0)
        sizes[round((now - back_at) / took)] = state.current
    assert sizes[1] >= before.current
    assert sizes[2] == 400
    assert state.baseline_s == before.baseline_s
    # And the next batch's window goes on from there, not from the floor
    assert rebound(state, 400, settings).current == state.current


def test_a_kept_limit_goes_on_under_the_next_batchs_bounds() -> None:
    kept = Limit(40.0, low=2, high=64, baseline_s=0.02)
    # the next batch has more tasks: a smaller share
    assert rebound(kept, 16, ON).current == 16
    assert rebound(kept, 16, ON).baseline_s == kept.baseline_s
    assert rebound(kept, 64, ON).current == 40
    # none kept (a fresh worker or endpoint): a ramp from the floor
    assert rebound(None, 64, ON).current == 2
    assert rebound(None, 64, ON).ramping
    # a ramp that measured no baseline yet starts again from the floor; one that did goes on
    ramp = replace(initial_limit(64, ON, ramp=True), limit=30.0)
    assert rebound(ramp, 64, ON).current == 2
    assert rebound(replace(ramp, baseline_s=0.02), 64, ON).current == 30
    assert rebound(kept, 64, AdaptiveSettings(enabled=False)).current == 64
    # an overload cut lasts its batch, as it always did
    cut = update(kept, OutcomeKind.BACKOFF, 0.0, 0.0, ON)
    assert cut.current == 20
    assert rebound(cut, 64, ON).current == 40


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
    st.booleans(),
)
def test_limit_stays_within_bounds(
    max_in_flight: int,
    min_in_flight: int,
    ratio: float,
    increase: float,
    seq: list[tuple[OutcomeKind, float, float]],
    ramp: bool,
) -> None:
    aimd = AdaptiveSettings(min_in_flight=min_in_flight, increase=increase, backoff_ratio=ratio)
    state = initial_limit(max_in_flight, aimd, ramp=ramp)
    now = 0.0
    for kind, latency, dt in seq:
        now += dt
        state = update(state, kind, latency, now, aimd)
        state, _ = ramp_if_stalled(state, now)
        assert min(min_in_flight, max_in_flight) <= state.current <= max_in_flight
        assert state.limit <= max_in_flight


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"min_in_flight": 0}, "adaptive.min_in_flight"),
        ({"increase": 0}, "adaptive.increase"),
        ({"backoff_ratio": 1.0}, "adaptive.backoff_ratio"),
        ({"latency_tolerance": 1.0}, "adaptive.latency_tolerance"),
    ],
)
def test_bad_settings_name_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AdaptiveSettings(**kwargs)
    assert caught.value.key == key
