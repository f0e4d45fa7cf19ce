"""Counting what the consumer received more than once, and one run's delivery summary."""

from __future__ import annotations

from bench.workloads.measure import Redeliveries, delivery_summary, redeliveries
from siding.devkit.sim_consumer import Received


def rec(i: int, received: float, attempt: int = 1, produced: float | None = 0.0) -> Received:
    return Received(f"t/0/{i}", attempt, received, produced, i)


def test_nothing_received_twice_counts_nothing() -> None:
    assert redeliveries([rec(0, 1.0), rec(1, 1.1)]) == Redeliveries(0, 0, 0, 0)


def test_a_retry_lane_attempt_is_a_new_attempt_number() -> None:
    # message 0: attempt 1, then the retry lane's attempt 2
    got = redeliveries([rec(0, 1.0), rec(0, 1.5, attempt=2), rec(1, 1.1)])
    assert got == Redeliveries(messages=1, receipts=1, retry_attempts=1, same_attempt=0)


def test_the_same_attempt_twice_is_a_duplicate_whatever_the_order_in_the_file() -> None:
    # the file's order is not time order: receipts are sorted by time first
    records = [rec(0, 2.0), rec(0, 1.0), rec(0, 3.0, attempt=2), rec(0, 4.0, attempt=2)]
    got = redeliveries(records)
    assert got == Redeliveries(messages=1, receipts=3, retry_attempts=1, same_attempt=2)


def test_every_attempt_counts_and_only_the_given_ids() -> None:
    records = [rec(0, 1.0), rec(0, 2.0), rec(0, 3.0), rec(9, 1.0), rec(9, 2.0)]
    assert redeliveries(records, {"t/0/0"}) == Redeliveries(1, 2, 0, 2)
    assert redeliveries(records).messages == 2


def test_summary_measures_fast_latency_and_counts_redeliveries() -> None:
    records = [
        rec(1, 10.1, produced=10.0),  # fast, 100 ms
        rec(2, 10.3, produced=10.0),  # fast, 300 ms
        rec(3, 10.2, produced=10.0),  # slow
        rec(3, 10.6, attempt=2, produced=10.0),  # its retry-lane attempt
        rec(0, 9.0, produced=9.0),  # warm-up: not expected, not counted
        rec(0, 9.5, produced=9.0),
    ]
    expected = {"t/0/1", "t/0/2", "t/0/3", "t/0/4"}
    got = delivery_summary(records, fast={"t/0/1", "t/0/2", "t/0/4"}, expected=expected)
    assert got["fast_p50_ms"] == 200.0
    assert got["fast_messages"] == 2
    assert (got["delivered"], got["expected"]) == (3, 4)
    assert (got["delivered_more_than_once"], got["redeliveries"]) == (1, 1)
    assert (got["redeliveries_retry_attempts"], got["redeliveries_same_attempt"]) == (1, 0)


def test_summary_without_attempts_counts_but_does_not_split() -> None:
    records = [rec(1, 1.0), rec(1, 2.0)]
    got = delivery_summary(records, fast=set(), expected={"t/0/1"}, attempts_known=False)
    assert got["fast_p50_ms"] is None
    assert (got["delivered_more_than_once"], got["redeliveries"]) == (1, 1)
    assert got["redeliveries_retry_attempts"] is None
    assert got["redeliveries_same_attempt"] is None
