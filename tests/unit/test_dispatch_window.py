"""The in-flight window: concurrency, deadlines, steps per outcome, not-before, rate, stop."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import pytest

from siding.dispatch import (
    AdaptiveSettings,
    DispatchInterrupted,
    DispatchReport,
    DispatchSettings,
    Work,
    adaptive,
    dispatch,
)
from siding.errors import EndpointGoneError
from siding.model import Delivery, Lane, Outcome, OutcomeKind, delivery_id
from siding.steps import Done, ToDlq, ToLane
from siding.transport.fake import ScriptedTransport

LANES = (Lane(delay_s=10.0, deadline_s=5.0), Lane(delay_s=60.0, deadline_s=5.0))
SETTINGS = DispatchSettings(max_in_flight=100, deadline_s=1.0, lanes=LANES)
RETRY = Outcome(OutcomeKind.RETRY, "consumer said retry")
DEAD = Outcome(OutcomeKind.DEAD, "unparseable")


def rec(offset: int, attempt: int = 1, lane: int = 0) -> Delivery:
    return Delivery(
        delivery_id("trips", 0, offset), "trips", 0, offset, None, b"v", attempt=attempt, lane=lane
    )


def items(n: int) -> list[Work]:
    return [Work(rec(i)) for i in range(n)]


def assert_complete(report: DispatchReport, work: list[Work]) -> None:
    """Every input exactly once, in input order."""
    assert [s.work for s in report.settled] == work


async def test_empty_slice_returns_an_empty_report() -> None:
    report = await dispatch(ScriptedTransport(), [], SETTINGS)
    assert report.settled == ()
    assert report.stats.sends == 0


async def test_a_thousand_items_go_a_hundred_at_a_time() -> None:
    # Given 1,000 items and a consumer that takes 50 ms each
    transport = ScriptedTransport(latency_s=0.05)
    work = items(1000)
    # When they are dispatched with a window of 100
    report = await dispatch(transport, work, SETTINGS)
    # Then all are done, and 100 were in flight at once (50 s sequentially, ~0.5 s like this)
    assert_complete(report, work)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert transport.max_concurrent == 100
    assert report.stats.max_in_flight == 100
    assert report.stats.sends == 1000
    assert report.stats.outcomes == {OutcomeKind.ACK: 1000}
    assert report.stats.latency.count == 1000
    assert 0.045 <= report.stats.latency.quantile(0.5) <= 0.5


@pytest.mark.parametrize("limit", [1, 7, 32])
async def test_never_more_than_max_in_flight(limit: int) -> None:
    rng = random.Random(limit)
    latencies = {rec(i).id: rng.uniform(0, 0.01) for i in range(80)}
    transport = ScriptedTransport(latency_s=lambda d: latencies[d.id])
    settings = DispatchSettings(max_in_flight=limit, deadline_s=1.0, lanes=LANES)
    report = await dispatch(transport, items(80), settings)
    assert len(report.done) == 80
    assert transport.max_concurrent == limit
    assert max(r.concurrent for r in transport.sends) <= limit


async def test_items_complete_out_of_order_and_the_report_keeps_input_order() -> None:
    # Given the earlier items are the slower ones
    transport = ScriptedTransport(latency_s=lambda d: 0.01 * (10 - d.offset))
    work = items(10)
    report = await dispatch(transport, work, SETTINGS)
    finished = [r.delivery.offset for r in transport.sends]
    assert finished == list(range(9, -1, -1))
    assert_complete(report, work)


async def test_past_the_deadline_goes_to_the_first_retry_lane() -> None:
    transport = ScriptedTransport(latency_s=lambda d: 5.0 if d.offset == 3 else 0.0)
    settings = DispatchSettings(max_in_flight=10, deadline_s=0.05, lanes=LANES)
    before_ms = int(time.time() * 1000)
    report = await dispatch(transport, items(6), settings)
    step = report.settled[3].step
    assert isinstance(step, ToLane)
    assert (step.lane, step.attempt) == (1, 2)
    assert step.not_before_ms >= before_ms + 10_000
    assert "deadline" in step.reason
    assert len(report.done) == 5


async def test_a_transport_that_ignores_its_deadline_is_cut_off_by_the_safety_net() -> None:
    transport = ScriptedTransport(latency_s=30.0, honour_deadline=False)
    settings = DispatchSettings(max_in_flight=10, deadline_s=0.05, lanes=LANES)
    report = await asyncio.wait_for(dispatch(transport, items(3), settings), 5)
    assert all(isinstance(s.step, ToLane) and s.step.lane == 1 for s in report.settled)
    assert transport.in_flight == 0


async def test_dead_goes_to_the_dlq() -> None:
    transport = ScriptedTransport({rec(1).id: DEAD})
    report = await dispatch(transport, items(3), SETTINGS)
    assert report.settled[1].step == ToDlq("unparseable")
    assert len(report.done) == 2
    assert report.stats.outcomes[OutcomeKind.DEAD] == 1


async def test_retry_goes_to_the_next_lane_and_retry_on_the_last_attempt_to_the_dlq() -> None:
    # Given one item in the main lane and one on its last attempt (lane 2, attempt 3)
    work = [Work(rec(1)), Work(rec(2, attempt=3, lane=2))]
    transport = ScriptedTransport({rec(1).id: RETRY, rec(2).id: RETRY})
    settings = DispatchSettings(max_in_flight=10, deadline_s=1.0, lanes=LANES, lane=2)
    report = await dispatch(transport, work, settings)
    first, last = (s.step for s in report.settled)
    assert isinstance(first, ToLane)
    assert (first.lane, first.attempt) == (1, 2)
    assert isinstance(last, ToDlq)
    assert "exhausted" in last.reason


async def test_backoff_redelivers_in_place_without_spending_the_attempt() -> None:
    busy = Outcome(OutcomeKind.BACKOFF, "http 429", retry_after_s=0.02)
    transport = ScriptedTransport({rec(1).id: [busy, busy, Outcome(OutcomeKind.ACK)]})
    report = await dispatch(transport, items(2), SETTINGS, rand=lambda: 0.0)
    assert isinstance(report.settled[1].step, Done)
    again = [r for r in transport.sends if r.delivery.offset == 1]
    assert [r.delivery.attempt for r in again] == [1, 1, 1]
    # the consumer's Retry-After was honoured between the sends
    assert again[1].started_at - again[0].ended_at >= 0.015
    assert report.stats.outcomes[OutcomeKind.BACKOFF] == 2


async def test_not_before_is_respected_without_holding_a_slot() -> None:
    # Given one slot, a first item due in 200 ms and a second due now
    due_ms = int(time.time() * 1000) + 200
    work = [Work(rec(1), not_before_ms=due_ms), Work(rec(2))]
    transport = ScriptedTransport(latency_s=0.01)
    settings = DispatchSettings(max_in_flight=1, deadline_s=1.0, lanes=LANES)
    report = await dispatch(transport, work, settings)
    assert len(report.done) == 2
    late, early = (next(r for r in transport.sends if r.delivery.offset == i) for i in (1, 2))
    # Then the first was not sent before its time, and the second did not wait for it
    assert late.started_at * 1000 >= due_ms
    assert early.ended_at * 1000 < due_ms


async def test_rate_limit_spaces_the_sends() -> None:
    transport = ScriptedTransport()
    settings = DispatchSettings(
        max_in_flight=50, deadline_s=1.0, lanes=LANES, rate_limit=100, rate_burst=1
    )
    report = await dispatch(transport, items(21), settings)
    assert len(report.done) == 21
    starts = sorted(r.started_at for r in transport.sends)
    # 1 token at the start, then 20 more at 100/s: at least ~0.2 s from the first to the last
    assert starts[-1] - starts[0] >= 0.19


async def test_gone_raises_and_cancels_the_sends_in_flight() -> None:
    gone = Outcome(OutcomeKind.GONE, "http 410: endpoint gone")
    transport = ScriptedTransport(
        {rec(0).id: gone}, latency_s=lambda d: 0.0 if d.offset == 0 else 5.0
    )
    with pytest.raises(EndpointGoneError, match="410"):
        await asyncio.wait_for(dispatch(transport, items(5), SETTINGS), 2)
    assert transport.in_flight == 0


async def test_stop_event_interrupts_and_cancels_the_sends_in_flight() -> None:
    transport = ScriptedTransport(latency_s=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(dispatch(transport, items(20), SETTINGS, stop=stop))
    deadline = time.monotonic() + 2
    while transport.in_flight < 20:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)
    stop.set()
    with pytest.raises(DispatchInterrupted, match="20 of 20"):
        await asyncio.wait_for(task, 1)
    assert transport.in_flight == 0
    assert DispatchInterrupted.retriable


async def test_a_transport_bug_propagates() -> None:
    def broken(_delivery: Delivery, _nth: int) -> Outcome:
        raise RuntimeError("programming error")

    transport = ScriptedTransport(broken)
    with pytest.raises(RuntimeError, match="programming error"):
        await asyncio.wait_for(dispatch(transport, items(3), SETTINGS), 2)


async def test_failures_cut_the_adaptive_limit() -> None:
    transport = ScriptedTransport(latency_s=0.005, script=lambda _d, _n: RETRY)
    report = await dispatch(transport, items(300), SETTINGS)
    assert report.stats.final_limit < SETTINGS.max_in_flight
    assert all(isinstance(s.step, ToLane) for s in report.settled)


def knee_transport(base_s: float, k_s: float, knee: int) -> ScriptedTransport:
    """A consumer that answers in ``base_s`` up to ``knee`` calls, ``k_s`` more per call above."""
    transport = ScriptedTransport(
        latency_s=lambda _d: base_s + k_s * max(0, transport.in_flight - knee)
    )
    return transport


LATENCY_ON = AdaptiveSettings(latency=True)


async def test_the_latency_limit_goes_on_from_the_last_dispatch() -> None:
    # Given a consumer that slows down above 4 calls, the latency limit on, and a limit kept
    # between dispatches
    settings = DispatchSettings(max_in_flight=64, deadline_s=5.0, lanes=LANES, adaptive=LATENCY_ON)
    limits: dict[int, adaptive.Limit] = {}
    first = knee_transport(0.01, 0.005, knee=4)
    report = await dispatch(first, items(600), settings, limits=limits)
    # When the first dispatch (a fresh limit: it starts at the top and descends) is done
    assert first.max_concurrent == 64
    kept = limits[settings.lane]
    assert not kept.descending
    assert report.stats.final_limit == kept.current < 16
    # Then the next one starts where it ended, not at max_in_flight again (its first calls find
    # the consumer idle and answered fast, so it may grow a little before it is cut again)
    second = knee_transport(0.01, 0.005, knee=4)
    await dispatch(second, items(100), settings, limits=limits)
    assert second.max_concurrent <= 2 * kept.current
    # And without a kept limit, each dispatch starts at the top
    fresh = knee_transport(0.01, 0.005, knee=4)
    await dispatch(fresh, items(100), settings)
    assert fresh.max_concurrent == 64


async def test_without_the_latency_limit_each_dispatch_starts_at_the_top() -> None:
    # Given the same consumer and a kept limit, with the default adaptive settings (latency off)
    settings = DispatchSettings(max_in_flight=64, deadline_s=5.0, lanes=LANES)
    limits: dict[int, adaptive.Limit] = {}
    first = knee_transport(0.01, 0.005, knee=4)
    await dispatch(first, items(600), settings, limits=limits)
    # Then the window was never cut for its latency, and the next dispatch starts at the top
    # again, as main's always did
    assert first.max_concurrent == 64
    assert not limits[settings.lane].descending
    assert limits[settings.lane].current == 64
    second = knee_transport(0.01, 0.005, knee=4)
    await dispatch(second, items(100), settings, limits=limits)
    assert second.max_concurrent == 64


async def test_a_fresh_window_sends_its_first_calls_together() -> None:
    # Given a fresh latency limit (a worker's first window of an endpoint) and a consumer that holds
    # every call for 1 s
    transport = ScriptedTransport(latency_s=1.0)
    settings = DispatchSettings(max_in_flight=16, deadline_s=5.0, lanes=LANES, adaptive=LATENCY_ON)
    limits: dict[int, adaptive.Limit] = {}
    started = time.monotonic()
    await dispatch(transport, items(16), settings, limits=limits)
    # Then the 16 calls were all out at once and the dispatch took one answer's time
    assert transport.max_concurrent == 16
    assert time.monotonic() - started < 2.0
    # And small batches after it (records produced in pairs) go out together too
    pairs = ScriptedTransport(latency_s=0.01)
    for _ in range(10):
        await dispatch(pairs, items(2), settings, limits=limits)
        assert pairs.max_concurrent == 2


async def test_disabled_adaptive_keeps_max_in_flight() -> None:
    transport = ScriptedTransport(latency_s=0.005, script=lambda _d, _n: RETRY)
    settings = DispatchSettings(
        max_in_flight=20, deadline_s=1.0, lanes=LANES, adaptive=AdaptiveSettings(enabled=False)
    )
    report = await dispatch(transport, items(200), settings)
    assert report.stats.final_limit == 20
    assert transport.max_concurrent == 20


async def test_mixed_outcomes_each_item_once_with_matching_counts() -> None:
    rng = random.Random(7)
    kinds = [OutcomeKind.ACK, OutcomeKind.RETRY, OutcomeKind.DEAD]
    script = {rec(i).id: Outcome(rng.choice(kinds), "x") for i in range(500)}
    transport = ScriptedTransport(script, latency_s=lambda _d: rng.uniform(0, 0.003))
    work = items(500)
    report = await dispatch(transport, work, SETTINGS)
    assert_complete(report, work)
    expected = Counter(o.kind for o in script.values())
    assert report.stats.outcomes == dict(expected)
    assert len(report.done) == expected[OutcomeKind.ACK]
    assert len(report.to_lane) == expected[OutcomeKind.RETRY]
    assert len(report.to_dlq) == expected[OutcomeKind.DEAD]


async def test_a_send_cancelled_inside_the_transport_fails_instead_of_hanging() -> None:
    def cancelled(_delivery: Delivery, _nth: int) -> Outcome:
        raise asyncio.CancelledError

    transport = ScriptedTransport(cancelled)
    with pytest.raises(RuntimeError, match="was cancelled"):
        await asyncio.wait_for(dispatch(transport, items(2), SETTINGS), 2)
