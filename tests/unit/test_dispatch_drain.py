"""A draining stop in the window: once the drain is signalled nothing more is sent, calls out are
parked running, items not sent are handed to the park lane unsent, and the dispatch ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from siding.dispatch import AdaptiveSettings, DispatchSettings, ParkSettings, Work, dispatch
from siding.model import Delivery, Lane, Ordering, delivery_id
from siding.pipeline.executor.task import running_parked, watch_file
from siding.steps import Done, Parked
from siding.transport.fake import ScriptedTransport

LANES = (Lane(delay_s=10.0, deadline_s=5.0),)
# A ceiling far away: without the drain nothing would be parked before the calls answer.
PARK = ParkSettings(enabled=True, floor_s=0.05, ceiling_s=5.0)


def rec(offset: int, key: bytes | None = None) -> Delivery:
    return Delivery(delivery_id("t", 0, offset), "t", 0, offset, key, b"v")


def settings(ordering: Ordering = Ordering.UNORDERED) -> DispatchSettings:
    fixed = AdaptiveSettings(enabled=False)
    return DispatchSettings(
        max_in_flight=4, deadline_s=5.0, lanes=LANES, park=PARK, adaptive=fixed, ordering=ordering
    )


async def drained_after(delay_s: float) -> asyncio.Event:
    drain = asyncio.Event()
    asyncio.get_running_loop().call_later(delay_s, drain.set)
    return drain


async def test_a_drain_parks_the_calls_out_and_hands_over_the_rest_unsent() -> None:
    # Given ten slow items (1 s each) and a window of four: four go out at once
    transport = ScriptedTransport(latency_s=1.0)
    work = [Work(rec(i)) for i in range(10)]
    drain = await drained_after(0.2)
    started = time.monotonic()
    # When the drain is signalled while the first four are out
    report = await dispatch(transport, work, settings(), drain=drain)
    # Then the dispatch ends at once, nothing more was sent
    assert time.monotonic() - started < 0.8
    assert len(transport.sent_ids()) == 4
    steps = {s.work.delivery.offset: s.step for s in report.settled}
    assert all(isinstance(step, Parked) for step in steps.values())
    # And the four calls out keep running, parked with their tokens, due after their deadline
    out = {c.work.delivery.offset for c in report.parked}
    assert out == {0, 1, 2, 3}
    now_ms = int(time.time() * 1000)
    for offset, step in steps.items():
        assert isinstance(step, Parked)
        if offset in out:
            assert step.not_before_ms > now_ms + 4_000
        else:  # never sent: due at once in the park lane
            assert step.not_before_ms <= now_ms
    assert dict(running_parked(report)).keys() == {c.token for c in report.parked}
    outcomes = await asyncio.gather(*(c.task for c in report.parked))
    assert len(outcomes) == 4
    # And nobody was asked twice
    assert sorted(transport.sent_ids()) == sorted(w.delivery.id for w in work[:4])


async def test_answers_already_in_count_before_the_drain() -> None:
    transport = ScriptedTransport(latency_s=lambda d: 0.01 if d.offset < 2 else 1.0)
    drain = await drained_after(0.3)
    report = await dispatch(transport, [Work(rec(i)) for i in range(4)], settings(), drain=drain)
    steps = [s.step for s in report.settled]
    assert [type(s) for s in steps] == [Done, Done, Parked, Parked]
    await asyncio.gather(*(c.task for c in report.parked))


async def test_key_mode_goes_on_to_the_end_of_its_dispatch() -> None:
    # Key mode never parks (a later record of the key must not overtake): the drain waits.
    transport = ScriptedTransport(latency_s=0.2)
    drain = await drained_after(0.05)
    work = [Work(rec(i, key=b"k")) for i in range(3)]
    report = await dispatch(transport, work, settings(ordering=Ordering.KEY), drain=drain)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.parked == ()


async def test_the_drain_file_is_seen_when_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "route"
    seen = asyncio.Event()
    watch = asyncio.create_task(watch_file(str(path), seen, poll_s=0.01))
    await asyncio.sleep(0.05)
    assert not seen.is_set()
    path.write_text("1\n")
    await asyncio.wait_for(watch, 1.0)
    assert seen.is_set()
