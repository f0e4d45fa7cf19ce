"""Calls that outlive their dispatch: when the window parks, what it hands over, what it keeps."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from siding.dispatch import DispatchSettings, ParkSettings, ParkTimer, Work, dispatch
from siding.dispatch.parking import SETTLE_SLACK_MS, clamp, p75, parked_not_before_ms
from siding.model import Delivery, Lane, Ordering, OutcomeKind, delivery_id
from siding.steps import Done, Parked
from siding.transport.fake import ScriptedTransport

LANES = (Lane(delay_s=10.0, deadline_s=5.0),)
PARK = ParkSettings(enabled=True, floor_s=0.05, ceiling_s=0.2)
SETTINGS = DispatchSettings(max_in_flight=100, deadline_s=5.0, lanes=LANES, park=PARK)
WIDE = ParkSettings(enabled=True, floor_s=0.05, ceiling_s=2.5)
SLOW = {3, 7}


def rec(offset: int, key: bytes | None = None) -> Delivery:
    return Delivery(delivery_id("t", 0, offset), "t", 0, offset, key, b"v")


def latency(slow_s: float) -> ScriptedTransport:
    return ScriptedTransport(latency_s=lambda d: slow_s if d.offset in SLOW else 0.01)


async def test_slow_calls_are_parked_and_keep_running() -> None:
    # Given ten items, two of which take 1 s, and parking after at most 200 ms
    transport = latency(1.0)
    work = [Work(rec(i)) for i in range(10)]
    started = time.monotonic()
    # When they are dispatched
    report = await dispatch(transport, work, SETTINGS)
    took = time.monotonic() - started
    # Then the dispatch ends well before the slow calls answer
    assert took < 0.6
    parked = {s.work.delivery.offset: s.step for s in report.settled if isinstance(s.step, Parked)}
    assert set(parked) == SLOW
    assert all(
        isinstance(s.step, Done) for s in report.settled if s.work.delivery.offset not in SLOW
    )
    assert report.stats.parked == 2
    # And the parked calls are handed over running, each with its own token
    assert {c.work.delivery.offset for c in report.parked} == SLOW
    assert len({c.token for c in report.parked}) == 2
    assert {c.token for c in report.parked} == {p.token for p in parked.values()}
    outcomes = await asyncio.gather(*(c.task for c in report.parked))
    assert [o.kind for o, _ in outcomes] == [OutcomeKind.ACK, OutcomeKind.ACK]
    # And each call ran once: nothing was sent twice
    assert sorted(transport.sent_ids()) == sorted(w.delivery.id for w in work)


async def test_a_parked_record_is_due_only_after_its_call_could_have_answered() -> None:
    transport = latency(1.0)
    before_ms = int(time.time() * 1000)
    report = await dispatch(transport, [Work(rec(3))], SETTINGS)
    (item,) = report.settled
    assert isinstance(item.step, Parked)
    # deadline 5 s + grace 0.5 s + slack, from when the call started
    assert item.step.not_before_ms >= before_ms + 5_500 + SETTLE_SLACK_MS
    await asyncio.gather(*(c.task for c in report.parked))


async def test_nothing_is_parked_when_parking_is_off() -> None:
    transport = latency(0.3)
    settings = DispatchSettings(max_in_flight=100, deadline_s=5.0, lanes=LANES)
    report = await dispatch(transport, [Work(rec(i)) for i in range(5)], settings)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.parked == ()


async def test_key_mode_waits_for_its_calls() -> None:
    # Parking would let a later record of the key overtake the running one: key mode waits.
    transport = latency(0.4)
    settings = DispatchSettings(
        max_in_flight=100, deadline_s=5.0, lanes=LANES, park=PARK, ordering=Ordering.KEY
    )
    report = await dispatch(transport, [Work(rec(i, key=b"k")) for i in range(5)], settings)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.parked == ()


async def test_fast_batches_are_never_parked() -> None:
    # A floor far above the 10 ms calls: a scheduling stall of a loaded machine (the suite runs
    # beside Spark) must not read as answers gone quiet.
    park = ParkSettings(enabled=True, floor_s=0.5, ceiling_s=2.0)
    settings = replace(SETTINGS, park=park)
    transport = ScriptedTransport(latency_s=0.01)
    timer = ParkTimer()
    for _ in range(3):
        report = await dispatch(
            transport, [Work(rec(i)) for i in range(20)], settings, park_timer=timer
        )
        assert report.parked == ()
    # The timer learned the endpoint's pace: it parks at its floor now
    assert timer.park_after_s(park) == park.floor_s


def test_park_timer_follows_recent_latency_between_floor_and_ceiling() -> None:
    timer = ParkTimer(size=64)
    settings = ParkSettings(enabled=True, floor_s=0.05, ceiling_s=2.0)
    assert timer.park_after_s(settings) == 2.0  # nothing known yet: the ceiling
    for _ in range(64):
        timer.observe(0.1)
    assert timer.park_after_s(settings) == clamp(3 * 0.1, 0.05, 2.0)
    for _ in range(64):
        timer.observe(5.0)
    assert timer.park_after_s(settings) == 2.0


def test_p75_and_not_before() -> None:
    assert p75([1.0, 2.0, 3.0, 4.0]) == 3.0
    assert p75([5.0]) == 5.0
    assert parked_not_before_ms(1_000, 1.0, 0.1) == 1_000 + 1_100 + SETTLE_SLACK_MS


async def test_outliers_are_parked_once_the_answers_go_quiet() -> None:
    # Given a fresh endpoint (the age rule would wait its 2.5 s ceiling) and a slice whose last
    # calls are a small share of it
    settings = DispatchSettings(max_in_flight=100, deadline_s=5.0, lanes=LANES, park=WIDE)
    transport = ScriptedTransport(latency_s=lambda d: 3.0 if d.offset < 4 else 0.01)
    started = time.monotonic()
    report = await dispatch(transport, [Work(rec(i)) for i in range(40)], settings)
    # Then the slice ends soon after its normal answers (about 0.1 s), not after the ceiling
    # (half of it is the bound: a loaded machine must not decide this test)
    assert time.monotonic() - started < WIDE.ceiling_s / 2
    assert {c.work.delivery.offset for c in report.parked} == {0, 1, 2, 3}
    for call in report.parked:
        call.task.cancel()


async def test_a_slice_of_uniformly_slow_calls_is_not_parked_wholesale() -> None:
    # Given calls that all take 300 ms: none is an outlier, and the ceiling is not reached
    transport = ScriptedTransport(latency_s=0.3)
    settings = DispatchSettings(max_in_flight=100, deadline_s=5.0, lanes=LANES, park=WIDE)
    report = await dispatch(transport, [Work(rec(i)) for i in range(20)], settings)
    assert report.parked == ()
    assert all(isinstance(s.step, Done) for s in report.settled)
