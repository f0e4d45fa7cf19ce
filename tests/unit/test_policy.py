"""The retry policy: one table per decision, and properties that hold for any lanes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.model import DeadClass, DeadKind, Lane, Outcome, OutcomeKind
from siding.policy import (
    BACKOFF_CAP_S,
    backoff_delay,
    deadline_for,
    lane_for_attempt,
    max_attempts,
    next_step,
)
from siding.steps import Backoff, Decision, Done, Stop, ToDlq, ToLane

NOW = 1_700_000_000_000
LANES = (Lane(delay_s=10, deadline_s=30, attempts=1), Lane(delay_s=300, deadline_s=120, attempts=2))
CAP = 600.0
EXHAUSTED = DeadClass(DeadKind.RETRIES_EXHAUSTED)


def retry(reason: str = "grpc DEADLINE_EXCEEDED", after: float | None = None) -> Outcome:
    return Outcome(OutcomeKind.RETRY, reason, after)


def backoff(after: float | None = None) -> Outcome:
    return Outcome(OutcomeKind.BACKOFF, "http 503", after)


# (outcome, attempt, the step that must follow) with LANES, NOW and CAP
ROWS: list[tuple[Outcome, int, Decision]] = [
    (Outcome(OutcomeKind.ACK), 1, Done()),
    (Outcome(OutcomeKind.ACK), 4, Done()),
    (Outcome(OutcomeKind.DEAD, "bad payload"), 1, ToDlq("bad payload")),
    (Outcome(OutcomeKind.DEAD), 3, ToDlq("consumer answered DEAD")),
    (retry(), 1, ToLane(1, 2, NOW + 10_000, "grpc DEADLINE_EXCEEDED")),
    (retry(), 2, ToLane(2, 3, NOW + 300_000, "grpc DEADLINE_EXCEEDED")),
    (retry(), 3, ToLane(2, 4, NOW + 300_000, "grpc DEADLINE_EXCEEDED")),
    (retry("http 500"), 4, ToDlq("retries exhausted after 4 attempts: http 500", EXHAUSTED)),
    (retry("http 500"), 9, ToDlq("retries exhausted after 9 attempts: http 500", EXHAUSTED)),
    (retry(""), 1, ToLane(1, 2, NOW + 10_000, "consumer answered RETRY")),
    (retry("slow down", after=60), 1, ToLane(1, 2, NOW + 60_000, "slow down")),
    (retry("slow down", after=5), 1, ToLane(1, 2, NOW + 10_000, "slow down")),
    (retry("slow down", after=5000), 1, ToLane(1, 2, NOW + 600_000, "slow down")),
    (retry("slow down", after=0.0015), 3, ToLane(2, 4, NOW + 300_000, "slow down")),
    (backoff(after=7), 2, Backoff(7.0, "http 503")),
    (backoff(after=5000), 2, Backoff(CAP, "http 503")),
    (backoff(after=-3), 2, Backoff(0.0, "http 503")),
    (backoff(), 1, Backoff(0.5, "http 503")),
    (Outcome(OutcomeKind.GONE, "http 410: endpoint gone"), 2, Stop("http 410: endpoint gone")),
]


@pytest.mark.parametrize(("outcome", "attempt", "step"), ROWS)
def test_next_step(outcome: Outcome, attempt: int, step: Decision) -> None:
    assert next_step(outcome, attempt, LANES, NOW, max_retry_after_s=CAP) == step


def test_without_lanes_a_retry_goes_to_the_dlq() -> None:
    step = next_step(retry("http 500"), 1, (), NOW, max_retry_after_s=CAP)
    assert step == ToDlq("retries exhausted after 1 attempt: http 500", EXHAUSTED)


def test_backoff_without_retry_after_grows_with_consecutive_failures_and_jitters() -> None:
    step = next_step(
        backoff(), 1, LANES, NOW, max_retry_after_s=CAP, consecutive_backoffs=3, rand=0.5
    )
    assert step == Backoff(0.5 * 4 * 0.5, "http 503")


def test_a_zero_cap_ignores_retry_after() -> None:
    step = next_step(retry("x", after=60), 1, LANES, NOW, max_retry_after_s=0)
    assert step == ToLane(1, 2, NOW + 10_000, "x")


def test_sub_millisecond_delays_never_wait_less() -> None:
    lanes = (Lane(delay_s=0.0015, deadline_s=1),)
    step = next_step(retry(), 1, lanes, NOW, max_retry_after_s=CAP)
    assert isinstance(step, ToLane)
    assert step.not_before_ms == NOW + 2


def test_attempt_zero_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="numbered from 1"):
        next_step(retry(), 0, LANES, NOW, max_retry_after_s=CAP)


@pytest.mark.parametrize(("attempt", "lane"), [(1, 0), (2, 1), (3, 2), (4, 2)])
def test_lane_for_attempt(attempt: int, lane: int) -> None:
    assert lane_for_attempt(attempt, LANES) == lane


@pytest.mark.parametrize("attempt", [0, -1, 5])
def test_lane_for_attempt_refuses_attempts_that_do_not_exist(attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        lane_for_attempt(attempt, LANES)


@pytest.mark.parametrize(("lane", "deadline"), [(0, 7.0), (1, 30.0), (2, 120.0)])
def test_deadline_for(lane: int, deadline: float) -> None:
    assert deadline_for(lane, 7.0, LANES) == deadline


@pytest.mark.parametrize("lane", [-1, 3])
def test_deadline_for_a_lane_that_does_not_exist(lane: int) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        deadline_for(lane, 7.0, LANES)


@pytest.mark.parametrize(
    ("consecutive", "rand", "delay"),
    [
        (1, None, 0.5),
        (2, None, 1.0),
        (3, None, 2.0),
        (7, None, 30.0),
        (10_000, None, 30.0),
        (3, 0.0, 0.0),
        (3, 0.25, 0.5),
        (10_000, 0.5, 15.0),
    ],
)
def test_backoff_delay(consecutive: int, rand: float | None, delay: float) -> None:
    assert backoff_delay(consecutive, rand) == pytest.approx(delay)


@pytest.mark.parametrize(("consecutive", "rand"), [(0, None), (1, 1.0), (1, -0.1)])
def test_backoff_delay_refuses_impossible_inputs(consecutive: int, rand: float | None) -> None:
    with pytest.raises(ValueError, match="must"):
        backoff_delay(consecutive, rand)


# -- properties ----------------------------------------------------------------------------------

lane_strategy = st.builds(
    Lane,
    delay_s=st.floats(min_value=0, max_value=86_400, allow_nan=False),
    deadline_s=st.floats(min_value=0.001, max_value=3600, allow_nan=False),
    attempts=st.integers(min_value=1, max_value=5),
)
lane_lists = st.lists(lane_strategy, max_size=10).map(tuple)
retry_afters = st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False)
caps = st.floats(min_value=0, max_value=3600, allow_nan=False)
nows = st.integers(min_value=0, max_value=2**42)


@st.composite
def lanes_and_attempt(draw: st.DrawFn) -> tuple[tuple[Lane, ...], int]:
    lanes = draw(lane_lists)
    return lanes, draw(st.integers(min_value=1, max_value=max_attempts(lanes)))


@given(lanes_and_attempt(), retry_afters, caps, nows)
def test_dead_never_goes_to_a_retry_lane(
    case: tuple[tuple[Lane, ...], int], after: float | None, cap: float, now: int
) -> None:
    lanes, attempt = case
    step = next_step(
        Outcome(OutcomeKind.DEAD, "x", after), attempt, lanes, now, max_retry_after_s=cap
    )
    assert isinstance(step, ToDlq)


@given(lane_lists, retry_afters, caps, nows)
def test_a_retry_after_the_last_attempt_goes_to_the_dlq(
    lanes: tuple[Lane, ...], after: float | None, cap: float, now: int
) -> None:
    step = next_step(retry("x", after), max_attempts(lanes), lanes, now, max_retry_after_s=cap)
    assert isinstance(step, ToDlq)
    assert step.reason.startswith(f"retries exhausted after {max_attempts(lanes)} attempt")


@given(lane_lists, st.lists(retry_afters, min_size=60, max_size=60), caps, nows)
def test_retrying_forever_makes_exactly_the_configured_attempts(
    lanes: tuple[Lane, ...], afters: list[float | None], cap: float, now: int
) -> None:
    attempt, made = 1, 1
    for after in afters:
        step = next_step(retry("x", after), attempt, lanes, now, max_retry_after_s=cap)
        if isinstance(step, ToDlq):
            break
        assert isinstance(step, ToLane)
        assert step.attempt == attempt + 1 <= max_attempts(lanes)
        attempt, made = step.attempt, made + 1
    assert made == max_attempts(lanes)


@given(lanes_and_attempt(), retry_afters, caps, nows)
def test_a_retry_waits_for_the_lane_delay_and_the_capped_retry_after(
    case: tuple[tuple[Lane, ...], int], after: float | None, cap: float, now: int
) -> None:
    lanes, attempt = case
    step = next_step(retry("x", after), attempt, lanes, now, max_retry_after_s=cap)
    if attempt == max_attempts(lanes):
        assert isinstance(step, ToDlq)
        return
    assert isinstance(step, ToLane)
    assert step.lane == lane_for_attempt(attempt + 1, lanes)
    delay = lanes[step.lane - 1].delay_s
    honoured = min(after or 0.0, cap)
    waited_ms = step.not_before_ms - now
    assert waited_ms >= delay * 1000 - 1e-6
    assert waited_ms >= honoured * 1000 - 1e-6
    assert waited_ms <= max(delay, honoured) * 1000 + 1  # and no longer than that


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), caps, st.integers(1, 50))
def test_backoff_honours_retry_after_up_to_the_cap(
    after: float, cap: float, consecutive: int
) -> None:
    step = next_step(
        backoff(after), 1, (), NOW, max_retry_after_s=cap, consecutive_backoffs=consecutive
    )
    assert step == Backoff(min(after, cap), "http 503")


@given(lane_lists)
def test_lane_for_attempt_is_monotonic_and_covers_exactly_the_configured_attempts(
    lanes: tuple[Lane, ...],
) -> None:
    total = max_attempts(lanes)
    seen = [lane_for_attempt(n, lanes) for n in range(1, total + 1)]
    assert seen == sorted(seen)
    assert seen[0] == 0
    assert seen.count(0) == 1
    for k, lane in enumerate(lanes, start=1):
        assert seen.count(k) == lane.attempts
    with pytest.raises(ValueError, match="past the last"):
        lane_for_attempt(total + 1, lanes)


@given(st.integers(min_value=1, max_value=10_000), st.floats(min_value=0, max_value=0.999999))
def test_backoff_delay_stays_within_its_bounds(consecutive: int, rand: float) -> None:
    ceiling = backoff_delay(consecutive)
    assert 0 <= backoff_delay(consecutive, rand) <= ceiling <= BACKOFF_CAP_S
    assert backoff_delay(consecutive + 1) >= ceiling
