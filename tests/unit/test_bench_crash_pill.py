"""The crash-pill workload's pure reading of its results: the deaths the conviction counted and
the pill's receipts (bench/workloads/crash_pill.py)."""

from __future__ import annotations

from bench.workloads.crash_pill import counted_deaths, pill_receipts, repeats_after_deaths
from siding.devkit.harness import DeadLetter
from siding.devkit.sim_consumer import Received
from siding.dispatch.suspects import Conviction
from siding.model import Delivery, delivery_id
from siding.routing import story
from siding.routing.records import dlq_record


def letter(offset: int, reason_deaths: int) -> DeadLetter:
    delivery = Delivery(delivery_id("t", 0, offset), "t", 0, offset, None, b"v")
    step = Conviction(reason_deaths, 3).dead_letter("consumer lost after sending: x")
    record = dlq_record(delivery, step, hops=(), now_ms=1, route="r", dlq_topic="t.dlq")
    return DeadLetter(record.key, record.value, record.headers, story.decode(record.headers))


def test_the_deaths_counted_are_read_from_the_pills_own_letter() -> None:
    letters = [letter(7, 9), letter(1000, 4)]
    assert counted_deaths(letters, delivery_id("t", 0, 1000)) == 4
    assert counted_deaths(letters, delivery_id("t", 0, 5)) is None
    assert counted_deaths([], None) is None


def test_the_pills_receipts_are_timed_from_the_first_death() -> None:
    pill = delivery_id("t", 0, 1000)
    received = [
        Received(pill, 1, 99.5, 90.0, 1000, 0),
        Received(delivery_id("t", 0, 1), 1, 100.0, 99.0, 1, 0),
        Received(pill, 1, 110.25, 90.0, 1000, 0),
    ]
    assert pill_receipts(received, pill, 100.0) == [
        {"at_s": -0.5, "lane": 0, "attempt": 1},
        {"at_s": 10.25, "lane": 0, "attempt": 1},
    ]
    assert pill_receipts(received, None, 100.0) == []


def test_repeats_are_counted_by_the_death_they_followed_and_their_lane() -> None:
    a, b = delivery_id("t", 0, 1), delivery_id("t", 0, 2)
    received = [
        Received(a, 1, 101.0, 99.0, 1, 0),  # a first
        Received(b, 1, 99.5, 99.0, 2, 0),  # b first, before any death
        Received(a, 1, 103.0, 99.0, 1, 0),  # after the first death, main lane
        Received(b, 1, 112.0, 99.0, 2, 9),  # after the second, park lane
        Received(a, 2, 100.5, 99.0, 1, 1),  # a's first receipt is this one (earliest)
    ]
    assert repeats_after_deaths(received, [102.0, 110.0]) == [
        {"death": 0, "repeats": 1, "by_lane": {"0": 1}},  # a at 101.0, after its 100.5
        {"death": 1, "repeats": 1, "by_lane": {"0": 1}},
        {"death": 2, "repeats": 1, "by_lane": {"9": 1}},
    ]
    assert repeats_after_deaths([], []) == [{"death": 0, "repeats": 0, "by_lane": {}}]
