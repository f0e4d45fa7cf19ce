"""A consumer that is down is not a poison pill: the window waits behind the breaker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from siding.dispatch import (
    BreakerSettings,
    BreakerState,
    CircuitBreaker,
    DispatchInterrupted,
    DispatchSettings,
    Work,
    dispatch,
)
from siding.model import Delivery, Lane, Outcome, OutcomeKind, delivery_id
from siding.steps import Done, ToLane
from siding.transport.fake import ScriptedTransport

LANES = (Lane(delay_s=10.0, deadline_s=5.0),)
FAST_BREAKER = BreakerSettings(failure_threshold=3, open_for_s=0.05, max_open_for_s=0.1)
SETTINGS = DispatchSettings(max_in_flight=20, deadline_s=1.0, lanes=LANES, breaker=FAST_BREAKER)


def items(n: int, topic: str = "trips") -> list[Work]:
    return [Work(Delivery(delivery_id(topic, 0, i), topic, 0, i, None, b"v")) for i in range(n)]


async def wait_for(condition: str, check: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        await asyncio.sleep(0.005)


async def test_down_then_up_delivers_everything_and_dead_letters_nothing() -> None:
    # Given an endpoint that is down
    transport = ScriptedTransport(latency_s=0.002)
    transport.set_down(True)
    breaker = CircuitBreaker(FAST_BREAKER, transport.probe)
    work = items(100)
    task = asyncio.create_task(
        dispatch(transport, work, SETTINGS, breaker=breaker, rand=lambda: 0.0)
    )
    # When the breaker has opened and failed a probe or two, the endpoint comes back
    await wait_for("a failed probe", lambda: transport.probes >= 2)
    assert not task.done()
    transport.set_down(False)
    report = await asyncio.wait_for(task, 5)
    # Then every item is done: nothing went to a lane or the DLQ because it was down
    assert [s.work for s in report.settled] == work
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.stats.outcomes[OutcomeKind.BACKOFF] >= FAST_BREAKER.failure_threshold
    path = [(t.before, t.after) for t in report.stats.breaker_transitions]
    assert path[0] == (BreakerState.CLOSED, BreakerState.OPEN)
    assert (BreakerState.HALF_OPEN, BreakerState.OPEN) in path
    assert path[-2:] == [
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]
    assert report.stats.breaker_wait_s > 0
    assert breaker.state is BreakerState.CLOSED


async def test_no_sends_while_the_breaker_is_open() -> None:
    transport = ScriptedTransport()
    transport.set_down(True)
    slow = BreakerSettings(failure_threshold=3, open_for_s=10.0, max_open_for_s=10.0)
    breaker = CircuitBreaker(slow, transport.probe)
    stop = asyncio.Event()
    settings = DispatchSettings(max_in_flight=1, deadline_s=1.0, lanes=LANES, breaker=slow)
    task = asyncio.create_task(
        dispatch(transport, items(10), settings, breaker=breaker, stop=stop, rand=lambda: 0.0)
    )
    await wait_for("the breaker to open", lambda: breaker.state is BreakerState.OPEN)
    sent = len(transport.started)
    await asyncio.sleep(0.1)
    # Then no more sends went out while it was open, and nothing settled as a failure
    assert len(transport.started) == sent == slow.failure_threshold
    stop.set()
    with pytest.raises(DispatchInterrupted):
        await asyncio.wait_for(task, 1)


async def test_stop_while_waiting_on_the_breaker_interrupts() -> None:
    transport = ScriptedTransport()
    transport.set_down(True)
    stop = asyncio.Event()
    task = asyncio.create_task(dispatch(transport, items(5), SETTINGS, stop=stop, rand=lambda: 0.0))
    await wait_for("a probe", lambda: transport.probes >= 1)
    stop.set()
    with pytest.raises(DispatchInterrupted, match="5 of 5"):
        await asyncio.wait_for(task, 1)


async def test_two_dispatches_share_one_breaker_and_one_prober() -> None:
    transport = ScriptedTransport(latency_s=0.002)
    transport.set_down(True)
    patient = BreakerSettings(failure_threshold=3, open_for_s=0.2, max_open_for_s=0.2)
    breaker = CircuitBreaker(patient, transport.probe)
    settings = DispatchSettings(max_in_flight=10, deadline_s=1.0, lanes=LANES, breaker=patient)
    tasks = [
        asyncio.create_task(
            dispatch(transport, items(30, topic), settings, breaker=breaker, rand=lambda: 0.0)
        )
        for topic in ("a", "b")
    ]
    await wait_for("the breaker to open", lambda: breaker.state is BreakerState.OPEN)
    transport.set_down(False)
    reports = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert all(len(r.done) == 30 for r in reports)
    # one probe closed the breaker for both
    assert transport.probes == 1


async def test_one_message_told_to_back_off_while_others_are_served_moves_to_a_lane() -> None:
    # Given an endpoint that serves everyone but keeps answering "back off" for one message
    stuck = items(1)[0].delivery.id

    def answer(delivery: Delivery, _nth: int) -> Outcome:
        if delivery.id == stuck:
            return Outcome(OutcomeKind.BACKOFF, "http 503")
        return Outcome(OutcomeKind.ACK)

    transport = ScriptedTransport(answer, latency_s=0.002)
    settings = DispatchSettings(max_in_flight=20, deadline_s=0.2, lanes=LANES, breaker=FAST_BREAKER)
    # When the slice keeps flowing past it (others answered between its back-offs)
    work = items(400)
    report = await asyncio.wait_for(dispatch(transport, work, settings, rand=lambda: 0.0), 10)
    # Then it did not hold the batch forever: it went to the retry lane, everything else is done
    steps = {s.work.delivery.id: s.step for s in report.settled}
    step = steps[stuck]
    assert isinstance(step, ToLane)
    assert "back off" in step.reason
    assert all(isinstance(step, Done) for i, step in steps.items() if i != stuck)


async def test_a_lone_message_turned_away_while_probes_say_up_moves_on_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a slice of one message that the endpoint keeps turning away ("slow down"), while
    # its health probe says it is up: no other message is left to show that
    transport = ScriptedTransport({items(1)[0].delivery.id: Outcome(OutcomeKind.BACKOFF, "busy")})
    settings = DispatchSettings(max_in_flight=20, deadline_s=0.3, lanes=LANES, breaker=FAST_BREAKER)
    # When it is dispatched
    with caplog.at_level("WARNING", logger="siding.dispatch.window"):
        report = await asyncio.wait_for(
            dispatch(transport, items(1), settings, rand=lambda: 0.0), 10
        )
    # Then it does not loop in silence: each step after the first is logged with its id and
    # reason, and after a deadline of it, it moves to its next lane like any RETRY
    (settled,) = report.settled
    assert isinstance(settled.step, ToLane)
    assert "back off" in settled.step.reason and "busy" in settled.step.reason
    logged = [r.getMessage() for r in caplog.records]
    assert logged and all(items(1)[0].delivery.id in m and "busy" in m for m in logged)
    assert report.stats.holdouts == ((items(1)[0].delivery.id, "busy"),)


async def test_a_lone_message_turned_away_while_the_endpoint_is_down_waits() -> None:
    # Given the same lone message, but the endpoint is down: probes fail (an outage)
    transport = ScriptedTransport()
    transport.set_down(True)
    settings = DispatchSettings(max_in_flight=20, deadline_s=0.1, lanes=LANES, breaker=FAST_BREAKER)
    task = asyncio.create_task(dispatch(transport, items(1), settings, rand=lambda: 0.0))
    await asyncio.sleep(0.6)
    # Then it keeps waiting behind the breaker, long past its deadline: not moved to a lane
    assert transport.probes > 0
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
