"""The token bucket with an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.ratelimit import TokenBucket, default_burst
from siding.errors import ConfigError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_starts_full_then_refills_at_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, burst=3, clock=clock)
    # Given a full bucket of 3, three sends go at once and the fourth must wait 0.1 s
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s() == pytest.approx(0.1)
    # When 0.05 s pass, half a token is there: still no
    clock.now += 0.05
    assert not bucket.try_take()
    assert bucket.wait_s() == pytest.approx(0.05)
    # When another 0.05 s pass, one token
    clock.now += 0.05
    assert bucket.wait_s() == 0.0
    assert bucket.try_take()
    assert not bucket.try_take()


def test_never_holds_more_than_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, burst=2, clock=clock)
    clock.now += 3600
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]


def test_a_clock_that_steps_back_gives_no_tokens() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, burst=1, clock=clock)
    assert bucket.try_take()
    clock.now -= 5
    assert not bucket.try_take()
    clock.now += 5.1
    assert bucket.try_take()


def test_default_burst_is_a_tenth_of_a_second_and_at_least_one() -> None:
    assert default_burst(1000) == 100
    assert default_burst(2) == 1


@pytest.mark.parametrize(
    ("rate", "burst", "key"), [(0, None, "rate_limit"), (5, 0.5, "rate_burst")]
)
def test_bad_values_name_the_key(rate: float, burst: float | None, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        TokenBucket(rate, burst)
    assert caught.value.key == key


@settings(deadline=None)
@given(
    st.floats(0.5, 1000),
    st.floats(1, 50),
    st.lists(st.floats(0, 0.5), min_size=1, max_size=200),
)
def test_sends_over_any_span_stay_within_rate_times_span_plus_burst(
    rate: float, burst: float, steps: list[float]
) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, burst, clock=clock)
    start = clock.now
    taken = 0
    for dt in steps:
        clock.now += dt
        while bucket.try_take():
            taken += 1
    assert taken <= rate * (clock.now - start) + burst + 1e-6
