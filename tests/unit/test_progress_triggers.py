"""When a running task writes its progress record (docs/replay.md): every ``progress_interval``,
at once every ``progress_every`` ACKs, and at once when every call of its slice has answered;
so a crash re-delivers a bounded count, not a whole interval of a catch-up burst."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest

from siding.config import parse_config
from siding.errors import ConfigError
from siding.model import Delivery, Outcome, OutcomeKind
from siding.pipeline.executor.plan import TaskPlan
from siding.pipeline.executor.progress import DoneMap, covers, write_now
from siding.pipeline.executor.progress_task import Tracker
from siding.pipeline.executor.rows import Incoming
from siding.routing.producer import OutRecord
from tests.unit.test_replay_progress import TOPIC, delivery, marks, task_plan


@pytest.mark.parametrize(
    ("unwritten", "every", "answered", "expected", "now"),
    [
        (0, 10, 50, 50, False),  # nothing new: never, even with every call answered
        (9, 10, 9, 50, False),  # below the count, calls still out: the tick will write
        (10, 10, 10, 50, True),  # the count reached
        (25, 10, 30, 50, True),  # past it
        (3, 10, 50, 50, True),  # every call answered: written at once
        (3, 10, 51, 50, True),  # (a call sent twice counts twice: at worst an early write)
        (500, 0, 500, 1000, False),  # count off: by time, or once all answered
        (1, 0, 1000, 1000, True),
        (4, 10, 0, 0, False),  # nothing was expected (the expectation not set yet)
    ],
)
def test_when_a_task_writes_its_progress_at_once(
    unwritten: int, every: int, answered: int, expected: int, now: bool
) -> None:
    assert write_now(unwritten, every=every, answered=answered, expected=expected) is now


def plan_every(every: int, interval_s: float = 60.0) -> TaskPlan:
    plan = task_plan()
    assert plan.progress is not None
    return replace(plan, progress=replace(plan.progress, every=every, interval_s=interval_s))


def acked_offsets(written: list[OutRecord]) -> list[int]:
    """How many offsets each written record says were ACKed."""
    return [sum(e - s for s, e in m.known.acked.get((TOPIC, 0), ())) for m in marks(written)]


def test_acks_are_written_every_progress_every_acks_without_waiting_for_the_tick() -> None:
    # Given a task of 100 records, progress_every = 10 and a tick far away (60 s)
    plan = plan_every(10)
    written: list[OutRecord] = []
    tracker = Tracker(plan.progress, 0, written.append)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(100)])
    tracker.expect(100)
    # When 35 calls are ACKed, and one answered with a RETRY
    for offset in range(35):
        tracker.acked(delivery(offset))
    tracker.answered(delivery(35), acked=False)
    # Then a record was written at the 10th, 20th and 30th ACK: at most 9 ACKs are unrecorded
    assert acked_offsets(written) == [10, 20, 30]


def test_a_burst_whose_calls_all_answered_is_written_at_once() -> None:
    # Given a task of 7 records with progress_every far above them and a tick far away
    plan = plan_every(1000)
    written: list[OutRecord] = []
    tracker = Tracker(plan.progress, 0, written.append)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(7)])
    tracker.expect(7)
    # When 6 calls were ACKed, nothing is written yet (a call is still out)
    for offset in range(6):
        tracker.acked(delivery(offset))
    assert written == []
    # Then the last answer, even a RETRY, writes the ACKs at once
    tracker.answered(delivery(6), acked=False)
    assert acked_offsets(written) == [6]


def test_the_watched_transport_counts_every_answer_including_a_failed_call() -> None:
    class Answers:
        async def send(self, d: Delivery, deadline_s: float) -> Outcome:
            assert deadline_s == 1.0
            if d.offset == 2:
                raise ConnectionError("stream broke")
            return Outcome(OutcomeKind.ACK)

        async def probe(self) -> bool:
            return True

        async def close(self) -> None:
            return None

    plan = plan_every(0)  # by count: off
    written: list[OutRecord] = []
    tracker = Tracker(plan.progress, 0, written.append)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(3)])
    tracker.expect(3)
    watched = tracker.watch(Answers())

    async def send_all() -> None:
        for offset in range(3):
            with contextlib.suppress(ConnectionError):
                await watched.send(delivery(offset), 1.0)

    asyncio.run(send_all())
    # The failed call ended too: every call answered, so the two ACKs were written at once
    assert acked_offsets(written) == [2]


BASE = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://127.0.0.1:50051"
"""


def test_progress_every_defaults_to_100_and_bad_values_name_the_key() -> None:
    assert parse_config(BASE, env={}).route[0].progress_every == 100
    assert parse_config(BASE + "progress_every = 0\n", env={}).route[0].progress_every == 0
    for bad, says in (("-1", "at least 0"), ('"many"', "integer"), ("true", "true/false")):
        with pytest.raises(ConfigError) as caught:
            parse_config(f"{BASE}progress_every = {bad}\n", env={})
        assert "route[billing].progress_every" in str(caught.value)
        assert says in str(caught.value), str(caught.value)


def test_a_finished_slice_whose_acks_were_all_recorded_is_not_written_again() -> None:
    # Given a task whose 5 calls were all ACKed: written at once when the last one answered
    plan = plan_every(1000)
    written: list[OutRecord] = []
    tracker = Tracker(plan.progress, 0, written.append)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(5)])
    tracker.expect(5)
    for offset in range(5):
        tracker.acked(delivery(offset))
    assert len(written) == 1
    # When the task ends with nothing else to write, no second record says the same again
    tracker.written(plan)
    assert len(written) == 1


def test_a_finished_slice_with_lane_records_is_written_when_its_writes_are_done() -> None:
    # Given 4 calls answered: 3 ACKs and one RETRY (its record goes to a lane)
    plan = plan_every(1000)
    written: list[OutRecord] = []
    tracker = Tracker(plan.progress, 0, written.append)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(4)])
    tracker.expect(4)
    for offset in range(3):
        tracker.acked(delivery(offset))
    tracker.answered(delivery(3), acked=False)
    # When the lane write was acknowledged, the last record says the whole slice is durable
    tracker.written(plan)
    assert acked_offsets(written) == [3, 3]
    assert marks(written)[-1].known.written == {(TOPIC, 0): ((0, 4),)}


@pytest.mark.parametrize(
    ("done", "part", "covered"),
    [
        ({(TOPIC, 0): ((0, 10),)}, {(TOPIC, 0): ((2, 5),)}, True),
        ({(TOPIC, 0): ((0, 3), (4, 10))}, {(TOPIC, 0): ((2, 5),)}, False),
        ({(TOPIC, 0): ((0, 10),)}, {(TOPIC, 1): ((2, 5),)}, False),
        ({}, {}, True),
    ],
)
def test_covers(done: DoneMap, part: DoneMap, covered: bool) -> None:
    assert covers(done, part) is covered
