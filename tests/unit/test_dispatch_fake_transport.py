"""The scripted in-memory Transport that the dispatch tests (and others) drive."""

from __future__ import annotations

import asyncio

from siding.model import ACK, Delivery, Outcome, OutcomeKind, delivery_id
from siding.transport.base import Transport
from siding.transport.fake import ScriptedTransport

RETRY = Outcome(OutcomeKind.RETRY, "busy")
DEAD = Outcome(OutcomeKind.DEAD, "bad")


def rec(offset: int, attempt: int = 1) -> Delivery:
    return Delivery(delivery_id("t", 0, offset), "t", 0, offset, None, b"v", attempt=attempt)


async def test_is_a_transport() -> None:
    transport: Transport = ScriptedTransport()
    assert await transport.send(rec(1), 1.0) == ACK
    await transport.close()


async def test_mapping_script_answers_per_send_and_repeats_the_last() -> None:
    transport = ScriptedTransport({rec(1).id: [RETRY, DEAD], rec(2).id: DEAD})
    answers = [await transport.send(rec(1), 1.0) for _ in range(3)]
    assert answers == [RETRY, DEAD, DEAD]
    assert await transport.send(rec(2), 1.0) == DEAD
    assert await transport.send(rec(3), 1.0) == ACK


async def test_function_script_sees_the_delivery_and_how_often_it_was_sent() -> None:
    seen: list[tuple[int, int]] = []

    def answer(delivery: Delivery, nth: int) -> Outcome:
        seen.append((delivery.attempt, nth))
        return RETRY if nth == 0 else ACK

    transport = ScriptedTransport(answer)
    assert await transport.send(rec(1, attempt=1), 1.0) == RETRY
    assert await transport.send(rec(1, attempt=2), 1.0) == ACK
    assert seen == [(1, 0), (2, 1)]


async def test_latency_past_the_deadline_times_out_at_the_deadline() -> None:
    transport = ScriptedTransport(latency_s=lambda d: 5.0 if d.offset == 1 else 0.0)
    outcome = await asyncio.wait_for(transport.send(rec(1), 0.02), 1)
    assert outcome.kind is OutcomeKind.RETRY
    assert "deadline" in outcome.reason
    assert await transport.send(rec(2), 0.02) == ACK


async def test_a_hung_endpoint_ignores_the_deadline() -> None:
    transport = ScriptedTransport(latency_s=5.0, honour_deadline=False)
    task = asyncio.create_task(transport.send(rec(1), 0.01))
    await asyncio.sleep(0.05)
    assert not task.done()
    assert transport.in_flight == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert transport.in_flight == 0


async def test_down_answers_backoff_and_fails_probes() -> None:
    transport = ScriptedTransport()
    transport.set_down(True)
    outcome = await transport.send(rec(1), 1.0)
    assert outcome.kind is OutcomeKind.BACKOFF
    assert not await transport.probe()
    transport.set_down(False)
    assert await transport.probe()
    assert transport.probes == 2


async def test_records_every_send_with_times_and_concurrency() -> None:
    transport = ScriptedTransport(latency_s=0.02)
    await asyncio.gather(*(transport.send(rec(i), 1.0) for i in range(5)))
    assert transport.max_concurrent == 5
    assert transport.sent_ids() == [rec(i).id for i in range(5)]
    assert len(transport.sends) == 5
    assert all(r.ended_at - r.started_at >= 0.015 for r in transport.sends)
    assert all(r.outcome == ACK for r in transport.sends)
