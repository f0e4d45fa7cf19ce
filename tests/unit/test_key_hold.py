"""Key mode's hold (issue 19): followers are held with their attempt, read back by the main lane
beside the source, and the key returns to the main lane once nothing of it waits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from siding import naming
from siding.config import parse_config
from siding.dispatch import Settled, Work
from siding.dispatch.inbatch import (
    WAIT_FOR_DUE_MS,
    leaving,
    only_waiting,
    read_before_due,
    retry_in_batch,
    wait_until,
)
from siding.dispatch.keyorder import HELD, Blocker, KeyLines, Released, WaitEvent, follow
from siding.model import Delivery, LaneHop, Ordering, delivery_id
from siding.pipeline.driver.keystate import KeyWaits
from siding.pipeline.driver.source import starting_offsets_of
from siding.pipeline.executor.plan import TaskPlan, build_plan
from siding.pipeline.executor.rows import incoming
from siding.pipeline.executor.task import (
    retry_topic,
    route_out,
    slice_work,
    wait_events,
)
from siding.routing import story
from siding.routing.producer import OutRecord
from siding.steps import Done, Held, Resent, ToLane

CONFIG = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "r"
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:50051"
ordering = "key"
lanes = [{ delay = "1s" }, { delay = "5s" }]
"""
ROUTE = parse_config(CONFIG).route[0]
HOLD = naming.hold_topic("r")


def rec(offset: int, key: bytes | None = b"k", attempt: int = 1, lane: int = 0) -> Delivery:
    return Delivery(
        delivery_id("t", 0, offset), "t", 0, offset, key, b"v", attempt=attempt, lane=lane
    )


def plan(lane: int, waits: KeyWaits | None = None) -> TaskPlan:
    return build_plan(ROUTE, lane, {}, tasks=1, waiting=waits.snapshot() if waits else {})


def as_row(record: OutRecord) -> tuple[Any, ...]:
    """The row Spark's Kafka source gives for ``record`` (partition and offset of its topic)."""
    return (record.topic, 0, 0, record.key, record.value, list(record.headers), 0)


def source_row(offset: int, key: bytes = b"k") -> tuple[Any, ...]:
    return ("t", 0, offset, key, b"v", [("user", b"h")], 1000 + offset)


def test_a_held_record_keeps_its_attempt_and_story_and_gains_no_hop() -> None:
    # Given a record already in lane 1 (attempt 2) that is held behind an earlier one
    hop = LaneHop(0, 1, 5, "retry")
    delivery = rec(7, attempt=2, lane=1)
    settled = [Settled(Work(delivery), Held("following t/0/3"))]
    (out,) = route_out(plan(1), settled, {delivery.id: (hop,)}, now_ms=99)
    told = story.decode(out.headers)
    assert out.topic == HOLD
    assert told is not None
    assert (told.attempt, told.lane, told.hops, told.not_before_ms) == (2, 1, (hop,), 0)
    assert told.reason == "following t/0/3"


def test_the_main_lane_reads_the_hold_topic_back_with_each_records_story() -> None:
    # Given a held follower, and a retried record waiting out lane 1's delay, in the hold topic
    follower, retried = rec(7), rec(5)
    task = plan(0)
    held = route_out(
        task,
        [
            Settled(Work(follower), Held("following t/0/5")),
            Settled(Work(retried), ToLane(1, 2, 5_000, "sim: retry")),
        ],
        {},
        now_ms=1_000,
    )
    assert {r.topic for r in held} == {HOLD}
    items = incoming([source_row(9), *map(as_row, held)], 0, HOLD)
    assert [i.delivery.id for i in items] == [rec(9).id, follower.id, retried.id]
    # Then the source record is attempt 1 in the main lane; the follower is due at once, still
    # attempt 1 in the main lane; the retried one is attempt 2 in lane 1, due at its not-before
    got = [(i.delivery.attempt, i.delivery.lane, i.not_before_ms) for i in items]
    assert got == [(1, 0, 0), (1, 0, 0), (2, 1, 5_000)]
    # The retried one is dispatched with lane 1's deadline, not before its time, the others
    # with the main lane's, at once
    work = slice_work(task, items, set())
    got_work = [(w.deadline_s, w.not_before_ms) for w in work]
    assert got_work == [(None, 0), (None, 0), (ROUTE.lanes_as_model()[0].deadline_s, 5_000)]
    # When the main lane's batch runs before the retry is due, only the retried one waits for
    # its time in the batch (and is written back unchanged if it must leave before it)
    settings = task.settings
    assert [read_before_due(w, settings, now_ms=4_999) for w in work] == [None, None, Resent(5_000)]
    assert [read_before_due(w, settings, now_ms=5_000) for w in work] == [None] * 3
    # without a hold topic, the same row is a source record (siding headers not trusted)
    assert incoming([as_row(held[1])], 0)[0].delivery.attempt == 1


def test_only_keyed_records_of_a_key_mode_route_are_retried_through_the_hold_topic() -> None:
    keyed, unkeyed = rec(1), rec(2, key=None)
    assert retry_topic(plan(0), keyed)(1) == HOLD
    assert retry_topic(plan(0), unkeyed)(2) == naming.lane_topic("r", 2)
    unordered = build_plan(ROUTE.model_copy(update={"ordering": Ordering.UNORDERED}), 0, {}, 1, {})
    assert retry_topic(unordered, keyed)(1) == naming.lane_topic("r", 1)


def test_held_records_are_waiting_as_held_and_released_when_done() -> None:
    waits = KeyWaits("state")
    waits.apply([WaitEvent((0, b"k"), 3, 1, 0)])
    settled = [
        Settled(Work(rec(5)), Held("following t/0/3")),
        Settled(Work(rec(1)), Done()),
    ]
    assert wait_events(plan(0, waits), settled) == (
        WaitEvent((0, b"k"), 5, HELD),
        WaitEvent((0, b"k"), 1, None),
    )


def test_the_main_lane_starts_the_hold_topic_from_its_beginning() -> None:
    got = json.loads(starting_offsets_of({"t": ({0: 5}, "latest"), HOLD: ({}, "earliest")}, 2))
    assert got == {"t": {"0": 5, "1": -1}, HOLD: {"0": -2, "1": -2}}
    assert starting_offsets_of({"t": ({}, "latest")}, 2) == "latest"


def test_a_batch_left_with_only_retries_waits_for_them_when_most_of_it_waits() -> None:
    # Nothing else keeps the batch running only when every send left is a retry not yet due
    assert only_waiting([(5_000, 1)], {1}, others_out=False, now_ms=4_000)
    assert not only_waiting([(5_000, 1)], {1}, others_out=True, now_ms=4_000)
    assert not only_waiting([(5_000, 1), (0, 2)], {1}, others_out=False, now_ms=4_000)
    assert not only_waiting([(4_000, 1)], {1}, others_out=False, now_ms=4_000)  # due: it goes
    assert not only_waiting([], set(), others_out=False, now_ms=4_000)
    # It waits the bound when more lines wait for a retry than are free, else not at all
    assert wait_until(4_000, waiting_lines=3, free_lines=2, bound_ms=700) == 4_700
    assert wait_until(4_000, waiting_lines=2, free_lines=2, bound_ms=700) == 4_000
    assert wait_until(4_000, waiting_lines=1, free_lines=0) == 4_000 + WAIT_FOR_DUE_MS
    # The retries due after that leave now; the others stay
    assert leaving([(4_700, 1), (4_701, 2), (9_000, 3)], {1, 2, 3}, 4_700) == {2, 3}
    assert leaving([(4_701, 2)], {1, 2}, 4_000) == {2}


# ---- property: the main lane's loop, batch after batch, with a clock ---------------------------


@dataclass
class World:
    """A route in key mode, reduced to what ordering needs: the source, the hold topic (held
    records and retried ones waiting out their delay), the key state, a clock in ticks of one
    main-lane batch, and what the consumer ACKed first (and the lanes each ACKed record passed).
    ``fails`` says how many times each record answers RETRY (1 or 2) before its ACK."""

    fails: dict[int, int]
    waits: KeyWaits = field(default_factory=lambda: KeyWaits("state"))
    held: list[OutRecord] = field(default_factory=list)
    acked: list[Delivery] = field(default_factory=list)
    stories: dict[int, tuple[LaneHop, ...]] = field(default_factory=dict)
    sends: int = 0
    clock: int = 1_000
    # How many ticks a batch with nothing else to do may wait for its retries (``wait_until``).
    bound: int = 0

    def main(self, source: Sequence[int], data: st.DataObject) -> list[Settled]:
        """One main-lane batch, as ``run_slice`` makes it: read the hold topic beside the
        source, write back what is not due, dispatch the rest in key order."""
        self.clock += 1
        rows = [as_row(r) for r in self.held] + [source_row(o, b"k%d" % (o % 2)) for o in source]
        self.held = []
        task = plan(0, self.waits)
        items = incoming(rows, 0, HOLD)
        work = slice_work(task, items, set())
        settled = self.dispatch(task, work, data)
        hops = {i.delivery.id: i.hops for i in items if i.hops}
        self.held += [r for r in route_out(task, settled, hops, self.clock) if r.topic == HOLD]
        for s in settled:
            if isinstance(s.step, Done):
                d = s.work.delivery
                self.stories[d.offset] = (*hops.get(d.id, ()), *s.work.hops)
        self.waits.apply(wait_events(task, settled))
        return settled

    def dispatch(self, task: TaskPlan, work: Sequence[Work], data: st.DataObject) -> list[Settled]:
        """The window's key rules, sends in any order, a batch lasting one tick of the clock: a
        failed record's retry (``retry_in_batch``), and a retried record read back before its
        time (``read_before_due``), wait in the batch; each either falls due while other sends
        are out, or, once nothing else is (``only_waiting``), falls due while the batch waits
        for it (``wait_until``) or leaves the batch (``leaving``), its key's records then held
        behind it."""
        b = _Slice(list(work), task, self.clock)
        works, lines, steps, out, waiters = b.works, b.lines, b.steps, b.out, b.waiters
        take = b.take
        take(lines.start())
        while out or waiters:
            due = [(works[i].not_before_ms, i) for i in waiters]
            if only_waiting(due, waiters, others_out=bool(out), now_ms=self.clock):
                b.wait_or_leave(due, self.bound, data)
                continue
            # a waiting retry due before this batch's tick ends may fall due while other sends
            # are out (or is due already): it goes in this batch
            ready = sorted(i for i in waiters if works[i].not_before_ms <= self.clock + 1)
            if ready and (not out or data.draw(st.booleans())):
                index = data.draw(st.sampled_from(ready))
                del waiters[index]
                out.append(index)
                continue
            index = out.pop(data.draw(st.integers(0, len(out) - 1)))
            delivery = works[index].delivery
            self.sends += 1
            if delivery.attempt <= self.fails.get(delivery.offset, 0):
                due_ms = self.clock + data.draw(st.integers(0, 3))
                step = ToLane(delivery.lane + 1, delivery.attempt + 1, due_ms, "sim: retry")
                retried = retry_in_batch(works[index], step, task.settings, self.clock)
                if retried is not None:
                    waiters[index] = (works[index], step)
                    works[index] = retried
                    continue
                steps[index] = step
                take(lines.settle(index, Blocker(delivery.id, step.lane, due_ms)))
            else:
                steps[index] = Done()
                self.acked.append(delivery)
                take(lines.settle(index, None))
        return [Settled(w, steps[i]) for i, w in enumerate(works)]


@dataclass
class _Slice:
    """One batch's slice in ``World.dispatch``: its items, key lines, steps, sends out and
    retries waiting for their time."""

    works: list[Work]
    task: TaskPlan
    clock: int
    steps: dict[int, Any] = field(default_factory=dict)
    out: list[int] = field(default_factory=list)
    waiters: dict[int, tuple[Work, ToLane | Resent]] = field(default_factory=dict)
    until: int | None = None  # decided once, when the batch first has only retries left

    def __post_init__(self) -> None:
        self.lines = KeyLines([w.delivery for w in self.works], Ordering.KEY, self.task.waiting)

    def take(self, released: Released) -> None:
        for index in released.send:
            early = read_before_due(self.works[index], self.task.settings, self.clock)
            if early is None:
                self.out.append(index)
            else:
                self.waiters[index] = (self.works[index], early)
        for index, blocker in released.follow:
            early = read_before_due(self.works[index], self.task.settings, self.clock)
            self.steps[index] = follow(blocker) if early is None else early

    def wait_or_leave(self, due: list[tuple[int, int]], bound: int, data: st.DataObject) -> None:
        """Only retries are left: those due after the batch's wait leave it; if none does, the
        batch waits and one of them falls due and goes."""
        if self.until is None:
            free = self.lines.free_lines()
            waiting = len(self.waiters)
            self.until = wait_until(
                self.clock, waiting_lines=waiting, free_lines=free, bound_ms=bound
            )
        gone = leaving(due, self.waiters, self.until)
        for index in sorted(gone):
            left, step = self.waiters.pop(index)
            self.works[index] = left
            self.steps[index] = step
            lane = step.lane if isinstance(step, ToLane) else left.delivery.lane
            blocker = Blocker(left.delivery.id, lane, step.not_before_ms)
            self.take(self.lines.settle(index, blocker))
        if not gone:
            index = data.draw(st.sampled_from(sorted(self.waiters)))
            del self.waiters[index]
            self.out.append(index)


@settings(deadline=None, max_examples=150)
@given(
    st.integers(1, 40),
    st.dictionaries(st.integers(0, 39), st.integers(1, 2)),
    st.lists(st.integers(0, 6), max_size=30),
    st.data(),
)
def test_followers_wait_for_their_key_keep_attempt_1_and_the_key_comes_back(
    count: int, fails: dict[int, int], chunks: list[int], data: st.DataObject
) -> None:
    world = World({o: n for o, n in fails.items() if o < count}, bound=data.draw(st.integers(0, 3)))
    offsets = list(range(count))
    # Source records arrive in chunks, one main-lane batch each
    for chunk in chunks:
        taken, offsets = offsets[:chunk], offsets[chunk:]
        world.main(taken, data)
    world.main(offsets, data)
    # When the main lane keeps running, every retry falls due and the keys drain in bounded time
    for _ in range(5 * (len(world.fails) + 1)):
        world.main([], data)
    # Then nothing waits any more: the key is back in the main lane
    assert (world.held, world.waits.snapshot()) == ([], {})
    # Every record was ACKed exactly once, per key in offset order
    assert sorted(d.offset for d in world.acked) == list(range(count))
    for key in (b"k0", b"k1"):
        firsts = [d.offset for d in world.acked if d.key == key]
        assert firsts == sorted(firsts)
    # Only records that failed were charged an attempt, one per failure, each retried in its
    # lane (in the batch that failed it, or from the hold topic), with one hop per lane passed
    for d in world.acked:
        failures = world.fails.get(d.offset, 0)
        assert (d.attempt, d.lane) == (failures + 1, failures)
        hops = world.stories[d.offset]
        assert [(h.lane, h.attempt) for h in hops] == [(n, n + 1) for n in range(failures)]
    # No record was sent more often than its failures make it
    assert world.sends == count + sum(world.fails.values())
    # A new record of the key now goes straight out in the main lane
    (fresh,) = world.main([count], data)
    assert isinstance(fresh.step, Done)
