"""Key ordering through the whole window: per-key order, followers, waiting records."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from siding.dispatch import DispatchSettings, WaitingRecord, Work, dispatch
from siding.model import Delivery, Lane, Ordering, Outcome, OutcomeKind, delivery_id
from siding.steps import Done, Held, Resent, ToDlq, ToLane
from siding.transport.fake import ScriptedTransport

# Lane 1's delay is longer than a batch waits for a retry (``inbatch.WAIT_FOR_DUE_MS``): a record
# that fails here leaves the batch (the tests of the in-batch retry use ``SHORT``).
LANES = (Lane(delay_s=5.0, deadline_s=5.0), Lane(delay_s=30.0, deadline_s=5.0))
KEYED = DispatchSettings(max_in_flight=50, deadline_s=1.0, lanes=LANES, ordering=Ordering.KEY)
RETRY = Outcome(OutcomeKind.RETRY, "later")
DEAD = Outcome(OutcomeKind.DEAD, "bad")


def rec(offset: int, key: bytes | None, attempt: int = 1, lane: int = 0) -> Delivery:
    return Delivery(
        delivery_id("trips", 0, offset), "trips", 0, offset, key, b"v", attempt=attempt, lane=lane
    )


def offsets_sent(transport: ScriptedTransport, key: bytes | None) -> list[int]:
    return [d.offset for d in transport.started if d.key == key]


async def test_same_key_goes_one_after_another_in_offset_order_other_keys_in_parallel() -> None:
    # Given 3 keys x 10 records, shuffled, with random latencies
    rng = random.Random(3)
    work = [Work(rec(i, b"abc"[i % 3 : i % 3 + 1])) for i in range(30)]
    rng.shuffle(work)
    transport = ScriptedTransport(latency_s=lambda _d: rng.uniform(0.001, 0.01))
    report = await dispatch(transport, work, KEYED)
    assert [s.work for s in report.settled] == work
    assert all(isinstance(s.step, Done) for s in report.settled)
    for key in (b"a", b"b", b"c"):
        sent = offsets_sent(transport, key)
        assert sent == sorted(sent)
        # one at a time: each send of the key started after the previous one ended
        records = sorted(
            (r for r in transport.sends if r.delivery.key == key), key=lambda r: r.started_at
        )
        assert all(b.started_at >= a.ended_at for a, b in itertools.pairwise(records))
    assert transport.max_concurrent == 3


async def test_null_keys_are_unordered() -> None:
    transport = ScriptedTransport(latency_s=0.01)
    report = await dispatch(transport, [Work(rec(i, None)) for i in range(20)], KEYED)
    assert len(report.done) == 20
    assert transport.max_concurrent == 20


async def test_later_records_follow_one_that_went_to_a_retry_lane() -> None:
    # Given key k: 1 is fine, 2 answers RETRY, 3 and 4 come after; key j is unaffected
    transport = ScriptedTransport({rec(2, b"k").id: RETRY})
    work = [Work(rec(o, b"k")) for o in (1, 2, 3, 4)] + [Work(rec(5, b"j"))]
    report = await dispatch(transport, work, KEYED)
    steps = [s.step for s in report.settled]
    blocker = steps[1]
    assert isinstance(blocker, ToLane)
    assert (blocker.lane, blocker.attempt) == (1, 2)
    # Then 3 and 4 were never sent: they are held behind 2, charged nothing (issue 19)
    assert offsets_sent(transport, b"k") == [1, 2]
    assert steps[2:4] == [Held(f"following {rec(2, b'k').id}")] * 2
    assert isinstance(steps[4], Done)
    assert report.stats.followed == 2


async def test_a_dead_record_does_not_block_its_key() -> None:
    transport = ScriptedTransport({rec(1, b"k").id: DEAD})
    report = await dispatch(transport, [Work(rec(o, b"k")) for o in (1, 2, 3)], KEYED)
    assert isinstance(report.settled[0].step, ToDlq)
    assert all(isinstance(s.step, Done) for s in report.settled[1:])
    assert offsets_sent(transport, b"k") == [1, 2, 3]


async def test_backoff_holds_the_key_until_the_record_is_through() -> None:
    busy = Outcome(OutcomeKind.BACKOFF, "http 503", retry_after_s=0.01)
    transport = ScriptedTransport({rec(1, b"k").id: [busy, busy, Outcome(OutcomeKind.ACK)]})
    report = await dispatch(transport, [Work(rec(o, b"k")) for o in (1, 2)], KEYED)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert offsets_sent(transport, b"k") == [1, 1, 1, 2]


async def test_waiting_records_from_earlier_batches_are_not_overtaken() -> None:
    # Given key k has offset 5 waiting in lane 2 until some time from now
    later_ms = int(time.time() * 1000) + 60_000
    waiting = {(0, b"k"): [WaitingRecord(offset=5, lane=2, not_before_ms=later_ms)]}
    work = [Work(rec(o, b"k")) for o in (3, 7, 8)] + [Work(rec(9, b"j"))]
    transport = ScriptedTransport()
    # When the main lane dispatches 3, 7, 8 of k
    report = await dispatch(transport, work, KEYED, waiting=waiting)
    # Then 3 (older than the waiting one) is delivered; 7 and 8 are held behind the waiting record
    assert offsets_sent(transport, b"k") == [3]
    assert isinstance(report.settled[0].step, Done)
    for settled in report.settled[1:3]:
        assert settled.step == Held(f"following {rec(5, b'k').id}")
    assert isinstance(report.settled[3].step, Done)


async def test_the_waiting_record_itself_is_delivered_by_its_lane() -> None:
    # Given the lane-1 slice holds waiting records 5 and 6 of key k, both waiting in lane 1
    now_ms = int(time.time() * 1000)
    waiting = {(0, b"k"): [WaitingRecord(5, 1, now_ms), WaitingRecord(6, 1, now_ms)]}
    work = [Work(rec(6, b"k", attempt=2, lane=1)), Work(rec(5, b"k", attempt=2, lane=1))]
    settings = DispatchSettings(
        max_in_flight=10, deadline_s=1.0, lanes=LANES, lane=1, ordering=Ordering.KEY
    )
    transport = ScriptedTransport()
    report = await dispatch(transport, work, settings, waiting=waiting)
    # Then both are sent, 5 before 6
    assert offsets_sent(transport, b"k") == [5, 6]
    assert all(isinstance(s.step, Done) for s in report.settled)


@pytest.mark.parametrize("seed", range(5))
async def test_random_outcomes_never_break_key_order(seed: int) -> None:
    rng = random.Random(seed)
    kinds = [OutcomeKind.ACK] * 6 + [OutcomeKind.RETRY, OutcomeKind.DEAD]
    work = [Work(rec(i, rng.choice([b"a", b"b", b"c", b"d", None]))) for i in range(200)]
    rng.shuffle(work)
    script = {w.delivery.id: Outcome(rng.choice(kinds), "x") for w in work}
    transport = ScriptedTransport(script, latency_s=lambda _d: rng.uniform(0, 0.002))
    report = await dispatch(transport, work, KEYED)
    assert [s.work for s in report.settled] == work
    by_offset = {s.work.delivery.offset: s for s in report.settled}
    sent = {d.offset for d in transport.started}
    for key in (b"a", b"b", b"c", b"d"):
        offsets = sorted(o for o, s in by_offset.items() if s.work.delivery.key == key)
        assert offsets_sent(transport, key) == [o for o in offsets if o in sent]
        # after the first record of the key that went to a lane, nothing more of it was sent
        moved = [o for o in offsets if o in sent and isinstance(by_offset[o].step, ToLane)]
        if moved:
            assert all(o not in sent for o in offsets if o > moved[0])
            # ...and everything after it is held with its attempt unspent
            assert all(isinstance(by_offset[o].step, Held) for o in offsets if o > moved[0])


# ---- a retry that falls due inside its batch (issue 27, item 5) --------------------------------

SHORT = (Lane(delay_s=0.05, deadline_s=4.0), Lane(delay_s=30.0, deadline_s=5.0))
SHORT_KEYED = DispatchSettings(max_in_flight=50, deadline_s=1.0, lanes=SHORT, ordering=Ordering.KEY)
SLOW_S = 0.4


class Deadlines(ScriptedTransport):
    """Remembers the deadline each send was given."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.deadlines: list[tuple[str, int, float]] = []

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        self.deadlines.append((delivery.id, delivery.attempt, deadline_s))
        return await super().send(delivery, deadline_s)


def slow_j(delivery: Delivery) -> float:
    """Key j's record keeps the batch running while key k's retry waits out its delay."""
    return SLOW_S if delivery.key == b"j" else 0.001


async def test_a_retry_that_falls_due_while_the_batch_runs_is_delivered_in_it() -> None:
    # Given k/1 answers RETRY once, k/2 and k/3 behind it, and j/9 takes longer than lane 1's delay
    transport = Deadlines({rec(1, b"k").id: [RETRY, Outcome(OutcomeKind.ACK)]}, latency_s=slow_j)
    work = [Work(rec(o, b"k")) for o in (1, 2, 3)] + [Work(rec(9, b"j"))]
    began = time.time()
    report = await dispatch(transport, work, SHORT_KEYED)
    # Then k/1 went again in this batch, as lane 1 delivers it: attempt 2, lane 1, its deadline,
    # no earlier than lane 1's delay after its failure
    sent = [(d.offset, d.attempt, d.lane) for d in transport.started if d.key == b"k"]
    assert sent == [(1, 1, 0), (1, 2, 1), (2, 1, 0), (3, 1, 0)]
    assert (rec(1, b"k").id, 2, SHORT[0].deadline_s) in transport.deadlines
    first, retry = (s for s in transport.sends if s.delivery.offset == 1)
    assert retry.started_at - first.ended_at >= SHORT[0].delay_s - 0.005
    # ...and every record is done: nothing goes to the hold topic, nothing is held
    assert all(isinstance(s.step, Done) for s in report.settled)
    done = report.settled[0].work
    assert (done.delivery.attempt, done.delivery.lane, done.deadline_s) == (2, 1, 4.0)
    assert [(h.lane, h.attempt, h.reason) for h in done.hops] == [(0, 1, "later")]
    assert (report.stats.retried_in_batch, report.stats.left_batch, report.stats.followed) == (
        1,
        0,
        0,
    )
    # the batch took about the slow call, not the slow call plus a delay
    assert time.time() - began < SLOW_S + 0.3


async def test_a_retry_that_fails_again_leaves_the_batch_with_its_story() -> None:
    transport = ScriptedTransport({rec(1, b"k").id: RETRY}, latency_s=slow_j)
    work = [Work(rec(o, b"k")) for o in (1, 2)] + [Work(rec(9, b"j"))]
    report = await dispatch(transport, work, SHORT_KEYED)
    # Then its second failure sends it on to lane 2 (through the hold topic), as lane 1 would
    step = report.settled[0].step
    assert isinstance(step, ToLane)
    assert (step.lane, step.attempt) == (2, 3)
    retried = report.settled[0].work
    assert (retried.delivery.attempt, retried.delivery.lane, len(retried.hops)) == (2, 1, 1)
    # ...and the record behind it is held, unsent, its attempt unspent
    assert offsets_sent(transport, b"k") == [1, 1]
    assert report.settled[1].step == Held(f"following {rec(1, b'k').id}")
    assert report.settled[1].work.delivery.attempt == 1


async def test_a_retry_dead_in_the_batch_frees_its_key() -> None:
    transport = ScriptedTransport({rec(1, b"k").id: [RETRY, DEAD]}, latency_s=slow_j)
    work = [Work(rec(o, b"k")) for o in (1, 2)] + [Work(rec(9, b"j"))]
    report = await dispatch(transport, work, SHORT_KEYED)
    assert isinstance(report.settled[0].step, ToDlq)
    assert report.settled[0].work.delivery.attempt == 2
    assert offsets_sent(transport, b"k") == [1, 1, 2]
    assert isinstance(report.settled[1].step, Done)


async def test_a_retry_not_due_when_nothing_else_is_out_leaves_the_batch_at_once() -> None:
    # Given lane 1's delay is 30 s and nothing else keeps the batch running
    lanes = (Lane(delay_s=30.0, deadline_s=5.0), *SHORT[1:])
    settings = DispatchSettings(
        max_in_flight=50, deadline_s=1.0, lanes=lanes, ordering=Ordering.KEY
    )
    transport = ScriptedTransport({rec(1, b"k").id: RETRY}, latency_s=0.01)
    began = time.time()
    report = await dispatch(transport, [Work(rec(o, b"k")) for o in (1, 2)], settings)
    # Then the batch does not wait: k/1 leaves as it was answered (attempt 1 failed, to lane 1)
    assert time.time() - began < 1.0
    step, work = report.settled[0].step, report.settled[0].work
    assert isinstance(step, ToLane)
    assert (step.lane, step.attempt) == (1, 2)
    assert (work.delivery.attempt, work.delivery.lane, work.hops) == (1, 0, ())
    assert report.settled[1].step == Held(f"following {rec(1, b'k').id}")
    assert (report.stats.retried_in_batch, report.stats.left_batch) == (1, 1)


async def test_retries_stay_out_of_retry_lanes_and_unkeyed_records() -> None:
    # A retry lane's slice of a key route, and a record without a key, go on as before
    lane1 = DispatchSettings(
        max_in_flight=50, deadline_s=1.0, lanes=SHORT, lane=1, ordering=Ordering.KEY
    )
    transport = ScriptedTransport({rec(1, b"k", 2, 1).id: RETRY}, latency_s=slow_j)
    report = await dispatch(transport, [Work(rec(1, b"k", 2, 1)), Work(rec(9, b"j", 2, 1))], lane1)
    assert isinstance(report.settled[0].step, ToLane)
    transport = ScriptedTransport({rec(1, None).id: RETRY}, latency_s=slow_j)
    report = await dispatch(transport, [Work(rec(1, None)), Work(rec(9, b"j"))], SHORT_KEYED)
    assert isinstance(report.settled[0].step, ToLane)
    assert report.stats.retried_in_batch == 0


async def test_a_retry_read_back_before_its_time_is_delivered_when_it_falls_due() -> None:
    # Given the main lane reads k/1 back from the hold topic (attempt 2, lane 1) 100 ms before
    # its time, k/2 held behind it, k/3 new, and j/9 keeps the batch running
    due_ms = int(time.time() * 1000) + 100
    waiting = {(0, b"k"): [WaitingRecord(1, 1, due_ms), WaitingRecord(2, 0, 0)]}
    work = [
        Work(rec(1, b"k", attempt=2, lane=1), due_ms, deadline_s=4.0),
        Work(rec(2, b"k")),
        Work(rec(3, b"k")),
        Work(rec(9, b"j")),
    ]
    transport = ScriptedTransport(latency_s=slow_j)
    report = await dispatch(transport, work, SHORT_KEYED, waiting=waiting)
    # Then it goes in this batch, not before its time, and its key's records follow in order
    sent = [(d.offset, d.attempt, d.lane) for d in transport.started if d.key == b"k"]
    assert sent == [(1, 2, 1), (2, 1, 0), (3, 1, 0)]
    first = next(s for s in transport.sends if s.delivery.offset == 1)
    assert first.started_at * 1000 >= due_ms - 1
    assert all(isinstance(s.step, Done) for s in report.settled)


async def test_a_retry_read_back_leaves_unchanged_when_nothing_else_is_out() -> None:
    due_ms = int(time.time() * 1000) + 30_000
    waiting = {(0, b"k"): [WaitingRecord(1, 1, due_ms), WaitingRecord(2, 0, 0)]}
    work = [Work(rec(1, b"k", attempt=2, lane=1), due_ms), Work(rec(2, b"k"))]
    transport = ScriptedTransport()
    began = time.time()
    report = await dispatch(transport, work, SHORT_KEYED, waiting=waiting)
    assert time.time() - began < 1.0
    assert transport.started == []
    # Then it is written back as it came, due at its time, and the record behind it is held
    assert report.settled[0].step == Resent(due_ms)
    assert report.settled[1].step == Held(f"following {rec(1, b'k').id}")
    assert report.stats.left_batch == 1


async def test_a_batch_whose_keys_all_wait_for_retries_due_soon_waits_for_them() -> None:
    # Given keys k and m each answer RETRY on their first record, a record of each behind it,
    # lane 1's delay 0.3 s (within what a batch waits), and nothing else in the slice (a burst)
    lanes = (Lane(delay_s=0.3, deadline_s=4.0), *SHORT[1:])
    settings = DispatchSettings(
        max_in_flight=50, deadline_s=1.0, lanes=lanes, ordering=Ordering.KEY
    )
    transport = ScriptedTransport(
        {i: [RETRY, Outcome(OutcomeKind.ACK)] for i in (rec(1, b"k").id, rec(5, b"m").id)}
    )
    work = [Work(rec(o, b"k")) for o in (1, 2)] + [Work(rec(o, b"m")) for o in (5, 6)]
    began = time.time()
    report = await dispatch(transport, work, settings)
    took = time.time() - began
    # Then the batch waited for both retries and delivered them, as lane 1 would, and the
    # records behind them at attempt 1: nothing goes to the hold topic
    sent = [(d.offset, d.attempt, d.lane) for d in transport.started]
    assert sorted(sent) == [(1, 1, 0), (1, 2, 1), (2, 1, 0), (5, 1, 0), (5, 2, 1), (6, 1, 0)]
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert (report.stats.retried_in_batch, report.stats.left_batch) == (2, 0)
    # ...no earlier than their time, and not much later
    assert 0.3 <= took < 0.3 + 0.5


async def test_a_retry_beside_more_free_keys_leaves_the_batch_at_once() -> None:
    # Given k/1 answers RETRY (lane 1 in 0.3 s) while keys i and j are done at once: waiting
    # would hold two free keys for one that is blocked
    lanes = (Lane(delay_s=0.3, deadline_s=4.0), *SHORT[1:])
    settings = DispatchSettings(
        max_in_flight=50, deadline_s=1.0, lanes=lanes, ordering=Ordering.KEY
    )
    transport = ScriptedTransport({rec(1, b"k").id: RETRY})
    work = [Work(rec(o, b"k")) for o in (1, 2)] + [Work(rec(8, b"i")), Work(rec(9, b"j"))]
    began = time.time()
    report = await dispatch(transport, work, settings)
    # Then it leaves for the hold topic at once, its follower held
    assert time.time() - began < 0.25
    assert isinstance(report.settled[0].step, ToLane)
    assert report.settled[1].step == Held(f"following {rec(1, b'k').id}")
    assert report.stats.left_batch == 1


async def test_a_batch_waits_only_for_the_retries_due_within_its_bound() -> None:
    # Given the hold topic gave back k/1 due in 200 ms and m/5 due in 30 s, each with a held
    # record behind it, and nothing else
    now_ms = int(time.time() * 1000)
    soon, late = now_ms + 200, now_ms + 30_000
    waiting = {
        (0, b"k"): [WaitingRecord(1, 1, soon), WaitingRecord(2, 0, 0)],
        (0, b"m"): [WaitingRecord(5, 1, late), WaitingRecord(6, 0, 0)],
    }
    work = [
        Work(rec(1, b"k", attempt=2, lane=1), soon, deadline_s=4.0),
        Work(rec(2, b"k")),
        Work(rec(5, b"m", attempt=2, lane=1), late, deadline_s=4.0),
        Work(rec(6, b"m")),
    ]
    transport = ScriptedTransport()
    began = time.time()
    report = await dispatch(transport, work, SHORT_KEYED, waiting=waiting)
    # Then k/1 is delivered at its time, k/2 behind it; m/5 is written back unchanged at once
    # and m/6 stays held: the batch lasted about k/1's wait, not m/5's
    assert [(d.offset, d.attempt) for d in transport.started] == [(1, 2), (2, 1)]
    assert transport.sends[0].started_at * 1000 >= soon - 1
    assert [s.step for s in report.settled[2:]] == [
        Resent(late),
        Held(f"following {rec(5, b'm').id}"),
    ]
    assert all(isinstance(s.step, Done) for s in report.settled[:2])
    assert time.time() - began < 0.2 + 0.5
