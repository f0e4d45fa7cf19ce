"""The DLQ-flood guard."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.guard import flood_exceeded


@pytest.mark.parametrize(
    ("dead", "total", "ratio", "min_batch", "exceeded"),
    [
        (0, 0, 0.5, 0, False),  # empty batch
        (6, 10, 0.5, 10, True),  # 60 % dead
        (5, 10, 0.5, 10, False),  # exactly at the ratio is allowed
        (9, 9, 0.5, 10, False),  # too small a batch to judge
        (100, 100, 1.0, 1, False),  # ratio 1 turns the guard off
        (1, 100, 0.0, 1, True),  # ratio 0: any dead record stops the route
        (0, 100, 0.0, 1, False),
    ],
)
def test_table(dead: int, total: int, ratio: float, min_batch: int, exceeded: bool) -> None:
    assert flood_exceeded(dead, total, ratio, min_batch) is exceeded


@settings(deadline=None)
@given(st.integers(0, 1000), st.integers(1, 1000), st.floats(0, 0.99), st.integers(0, 100))
def test_more_dead_never_turns_the_guard_off(
    dead: int, total: int, ratio: float, min_batch: int
) -> None:
    dead = min(dead, total)
    if flood_exceeded(dead, total, ratio, min_batch):
        assert flood_exceeded(min(total, dead + 1), total, ratio, min_batch)
