"""The latency-aware adaptive limit (``adaptive.latency`` on, opt-in): a gradient on the
consumer's fast answers' latency, cuts on BACKOFF and on many RETRYs, and stays in bounds
(docs/dispatch.md, "Adaptive concurrency"). The default rule, AIMD, is test_adaptive.py's."""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.adaptive import (
    DESCENT_GAIN,
    MIN_SAMPLES,
    ROUND_SAMPLES,
    AdaptiveSettings,
    Limit,
    initial_limit,
    on_send,
    percentile,
    rebound,
    update,
)
from siding.errors import ConfigError
from siding.model import OutcomeKind

ON = AdaptiveSettings(enabled=True, min_in_flight=2, increase=1.0, backoff_ratio=0.5, latency=True)
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
    descend: bool = True,
    burst: bool = False,
) -> list[tuple[float, int]]:
    """A backlog sent to ``consumer`` under the limit (a new call whenever a slot is free), as
    the window does; (answer time, limit after it) for every answer. ``descend``: the limit
    starts at the top and descends, as a route's window does; else it only takes the first
    window's latency for its baseline. ``burst``: the calls sent at once all find each other
    open (as through a real transport, where a burst arrives before the consumer answers any of
    it); else each finds only those sent before it. Every event has a time of its own (1 us
    apart at least), as on a real clock."""
    rnd = random.Random(seed)
    state = initial_limit(max_in_flight, adaptive, descend=descend)
    now = 0.0
    out: list[tuple[float, float, OutcomeKind]] = []  # (answer at, sent at, answer)
    trace: list[tuple[float, int]] = []

    def fill(state: Limit) -> Limit:
        sending = max(0, state.current - len(out))
        for i in range(sending):
            took, kind = consumer(len(out) + (sending - i if burst else 1), rnd, now)
            heapq.heappush(out, (now + took, now, kind))
            state = on_send(state, len(out))
        return state

    state = fill(state)
    while now < seconds:
        at, sent, kind = heapq.heappop(out)
        now = max(at, now + 1e-6)
        state = update(state, kind, now - sent, now, adaptive)
        trace.append((now, state.current))
        state = fill(state)
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


def round_of(state: Limit, latency_s: float, now: float, out: int | None = None) -> Limit:
    """One round of the descent: ``out`` calls sent at ``now`` (the window's peak; the limit
    when omitted), of which ``ROUND_SAMPLES`` are answered in ``latency_s``, 1 ms apart."""
    for n in range(1, (out or state.current) + 1):
        state = on_send(state, n)
    for i in range(ROUND_SAMPLES):
        state = update(state, ACK, latency_s + i / 1000, now + latency_s + i / 1000, ON)
    return state


def test_a_dispatch_that_keeps_no_limit_starts_at_the_max() -> None:
    assert initial_limit(100, ON).current == 100
    assert not initial_limit(100, ON).descending


def test_a_fresh_limit_starts_at_the_top() -> None:
    # A worker's first window of an endpoint sends its first calls together: a batch of a few
    # records is not sent one by one (issue 27: the ramp from the floor serialised them)
    state = rebound(None, 64, ON)
    assert (state.current, state.descending) == (64, True)
    assert initial_limit(64, ON, descend=True).current == 64
    # (nothing to descend to when the floor is the top, nor when the limit is off)
    assert not initial_limit(2, ON, descend=True).descending
    assert not rebound(None, 64, AdaptiveSettings(enabled=False, latency=True)).descending


def test_small_batches_at_low_volume_stay_at_the_top() -> None:
    # Given a fresh worker's windows of two records each (records produced in pairs), each
    # answered, the next batch's window going on from the kept limit
    state: Limit | None = None
    for n in range(60):
        state = rebound(state, 64, ON)
        # Then each batch's pair goes out together
        assert state.current == 64
        for out in (1, 2):
            state = on_send(state, out)
        for i in range(2):
            state = update(state, ACK, 0.005, now=n + i / 1000, settings=ON)
    # (a round is judged within a batch: a batch of two says nothing about the consumer's knee)
    assert state is not None and state.descending and state.rounds == 0


def test_the_first_round_is_a_burst_and_is_not_compared() -> None:
    # Given a fresh limit whose first calls all went out at once
    state = initial_limit(100, ON, descend=True)
    # When their first ROUND_SAMPLES good answers are in
    state = round_of(state, 0.3, now=0.0)
    # Then its fast latency is a baseline for now, and the limit has not moved: a burst on new
    # connections is slow for reasons of its own (a real route's first 64 calls took 0.27-0.37 s
    # where the consumer's own latency was 20 ms)
    assert state.descending and state.current == 100
    assert state.baseline_s == pytest.approx(0.301)
    assert state.rounds == 1 and state.last_fast_s is None


def test_the_second_round_halves_what_the_window_had_out() -> None:
    # Given a fresh limit of 100 after its first round, with 40 calls out (its demand, not 100)
    state = round_of(initial_limit(100, ON, descend=True), 0.02, now=0.0, out=40)
    # When the second round is judged
    state = round_of(state, 0.02, now=1.0, out=40)
    # Then the window is halved from what it had out
    assert state.descending and state.current == 20
    assert state.last_fast_s == pytest.approx(0.021)
    assert state.last_limit == 100


def test_the_descent_goes_on_while_halving_pays_and_ends_at_the_limit_before() -> None:
    # Given a consumer past its knee: at 64 calls its fast answers take 580 ms, at 32 260 ms,
    # at 16 100 ms, at 8 and fewer 20 ms
    took = {64: 0.58, 32: 0.26, 16: 0.1, 8: 0.02, 4: 0.02}
    state = round_of(initial_limit(64, ON, descend=True), 0.3, now=0.0)
    limits = []
    now = 1.0
    while state.descending:
        state = round_of(state, took[state.current], now=now)
        limits.append(state.current)
        now += 1.0
    # Then each halving that made the answers faster (below DESCENT_GAIN of the last round's)
    # is followed by another; the one that did not (8 to 4) is undone
    assert max(0.26 / 0.58, 0.1 / 0.26, 0.02 / 0.1) < DESCENT_GAIN < 0.02 / 0.02
    assert limits == [32, 16, 8, 4, 8]
    # And the baseline is the unloaded latency: the gradient goes on from there
    assert state.baseline_s == pytest.approx(0.021)
    assert state.skip_until > now - 1.0


def test_a_consumer_without_a_knee_loses_one_round_at_half() -> None:
    state = round_of(initial_limit(64, ON, descend=True), 0.05, now=0.0)
    state = round_of(state, 0.01, now=1.0)
    assert state.current == 32
    state = round_of(state, 0.01, now=2.0)
    assert (state.current, state.descending) == (64, False)
    assert state.baseline_s == pytest.approx(0.011)


def test_a_descent_that_pays_down_to_the_floor_ends_there() -> None:
    # A consumer whose latency follows its calls all the way down (no fixed cost at all)
    state = round_of(initial_limit(16, ON, descend=True), 1.0, now=0.0)
    now = 1.0
    while state.descending:
        state = round_of(state, 0.01 * state.current, now=now)
        now += 1.0
    assert state.current == ON.min_in_flight
    assert state.baseline_s == pytest.approx(0.01 * ON.min_in_flight + 0.001)


def test_a_round_samples_only_calls_sent_in_it() -> None:
    # Given a descent whose second round has just halved the window (at 2.0 s)
    state = round_of(round_of(initial_limit(64, ON, descend=True), 0.3, 0.0), 0.58, 1.0)
    assert state.current == 32 and state.judge_from == pytest.approx(1.587)
    # When the calls sent before the halving answer (under the old load) and RETRYs come
    for i in range(40):
        state = update(state, ACK, 0.58, now=1.6 + i / 1000, settings=ON)
        state = update(state, OutcomeKind.RETRY, 0.001, now=1.6 + i / 1000, settings=ON)
    # Then none of them is a sample of the round
    assert state.samples == () and state.current == 32


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
    # Then the first calls went out together, and the descent was over within 2 s
    assert trace[0][1] == 64
    assert max(after(trace, 2.0)) <= 16
    # And after a few seconds the limit stays between the knee and the target
    settled = after(trace, 5.0)
    assert min(settled) >= 8
    assert max(settled) <= 12
    assert statistics.median(settled) in (9, 10, 11)


def test_a_limit_that_starts_at_the_top_misses_the_knee_of_a_burst() -> None:
    # Why the descent: started at the top, the first answers of a burst are already slow (all 64
    # calls are open at the consumer before it answers one), so the baseline is a loaded
    # latency and the limit never comes down (a real route held 63 of 64 calls so)
    trace = run_consumer(knee_consumer(0.02, 0.01, knee=8), seconds=10.0, burst=True, descend=False)
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
        # Then the descent's halving did not pay and the window stays open: at most a small cut
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
    # Then the descent halved the window once and undid it: the fast answers say the consumer
    # is not saturated. The halved round lasts until the slow calls left it a slot: 30 ms with
    # one call in ten slow, one slow call's time (2 s) with four in ten, whose slow calls hold
    # nearly every slot of a backlog's window
    assert min(limit for _, limit in trace) == 32
    halved = next(at for at, limit in trace if limit < 64)
    back = next(at for at, limit in trace if at > halved and limit == 64)
    assert back < (0.1 if slow_share < 0.2 else 2.1)
    # And the window is open from then on (with four in ten slow, a window of answers that
    # happen to be nearly all slow cuts it now and then, as before the descent)
    assert statistics.median(after(trace, back)) == 64
    if slow_share < 0.2:
        assert min(after(trace, back + 0.01)) == 64


def test_a_window_judges_by_its_fast_answers() -> None:
    samples = (0.01,) * 15 + (2.0,) * 5
    assert percentile(samples, 0.25) == 0.01
    assert percentile((0.3,), 0.25) == 0.3


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


def test_an_outage_during_the_descent_is_the_breakers_business() -> None:
    # Given a fresh window of 400 calls of a consumer that answers in 0.5 s, one round into its
    # descent, when the consumer dies (as in tests/e2e/test_poison_pills.py's outage) with the
    # second round half answered
    settings = AdaptiveSettings(enabled=True, min_in_flight=1, latency=True)
    state = initial_limit(400, settings, descend=True)
    for n in range(1, 401):
        state = on_send(state, n)
    for i in range(ROUND_SAMPLES):
        state = update(state, ACK, 0.5, now=0.5 + i / 1000, settings=settings)
    for i in range(ROUND_SAMPLES // 2):
        state = update(state, ACK, 0.5, now=1.2 + i / 1000, settings=settings)
    before = state
    assert before.descending and before.rounds == 1 and before.current == 400
    # When every call out comes back lost at once (BACKOFF, each with its own latency)
    for i in range(392):
        state = update(state, OutcomeKind.BACKOFF, 0.5 + i / 1000, now=1.3, settings=settings)
    # Then none of them is a sample, the descent and its baseline are where they were (the
    # round starts again), and the overload cut halved the window once
    assert (state.baseline_s, state.rounds, state.limit) == (
        before.baseline_s,
        before.rounds,
        before.limit,
    )
    assert state.samples == () and state.judge_from == 1.3
    assert state.current == 200
    # And the next batch goes on from the kept limit, not from a cut one
    assert rebound(state, 400, settings).current == 400


def test_a_kept_limit_goes_on_under_the_next_batchs_bounds() -> None:
    kept = Limit(40.0, low=2, high=64, baseline_s=0.02)
    # the next batch has more tasks: a smaller share
    assert rebound(kept, 16, ON).current == 16
    assert rebound(kept, 16, ON).baseline_s == kept.baseline_s
    assert rebound(kept, 64, ON).current == 40
    # none kept (a fresh worker or endpoint): at the top, to descend
    assert rebound(None, 64, ON).current == 64
    assert rebound(None, 64, ON).descending
    # a descent goes on where it was, its round begun afresh; the limit it would undo to is
    # under the new bounds too
    going = replace(
        initial_limit(64, ON, descend=True),
        limit=30.0,
        rounds=2,
        samples=(0.01,),
        round_peak=30,
        last_limit=60.0,
        judge_from=5.0,
    )
    on = rebound(going, 40, ON)
    assert (on.current, on.rounds, on.descending, on.last_limit) == (30, 2, True, 40.0)
    assert (on.samples, on.round_peak, on.judge_from) == ((), 0, -math.inf)
    assert rebound(kept, 64, AdaptiveSettings(enabled=False, latency=True)).current == 64
    # an overload cut lasts its batch, as it always did
    cut = update(kept, OutcomeKind.BACKOFF, 0.0, 0.0, ON)
    assert cut.current == 20
    assert rebound(cut, 64, ON).current == 40


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
    descend: bool,
) -> None:
    gradient = AdaptiveSettings(
        min_in_flight=min_in_flight, increase=increase, backoff_ratio=ratio, latency=True
    )
    state = initial_limit(max_in_flight, gradient, descend=descend)
    now = 0.0
    for kind, latency, dt in seq:
        now += dt
        state = on_send(state, state.current)
        state = update(state, kind, latency, now, gradient)
        assert min(min_in_flight, max_in_flight) <= state.current <= max_in_flight
        assert state.limit <= max_in_flight


def test_its_tolerance_must_be_above_one() -> None:
    # (a target of once the baseline would cut at every noise; the AIMD rule takes 1)
    with pytest.raises(ConfigError) as caught:
        AdaptiveSettings(latency=True, latency_tolerance=1.0)
    assert caught.value.key == "adaptive.latency_tolerance"
    assert AdaptiveSettings(latency_tolerance=1.0).latency_tolerance == 1.0
