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
from siding.dispatch import Held, Settled, Work
from siding.dispatch.keyorder import HELD, Blocker, KeyLines, Released, follow
from siding.model import Delivery, LaneHop, Ordering, delivery_id
from siding.pipeline.keystate import KeyParking, ParkEvent
from siding.pipeline.plan import TaskPlan, build_plan
from siding.pipeline.rows import incoming
from siding.pipeline.source import starting_offsets_of
from siding.pipeline.task import park_events, route_out
from siding.policy import Done, ToLane
from siding.routing import story
from siding.routing.producer import OutRecord

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


def rec(offset: int, key: bytes = b"k", attempt: int = 1, lane: int = 0) -> Delivery:
    return Delivery(
        delivery_id("t", 0, offset), "t", 0, offset, key, b"v", attempt=attempt, lane=lane
    )


def plan(lane: int, parking: KeyParking | None = None) -> TaskPlan:
    return build_plan(ROUTE, lane, {}, tasks=1, parked=parking.snapshot() if parking else {})


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


def test_the_main_lane_reads_held_records_back_due_at_once_from_the_main_lane() -> None:
    delivery = rec(7, attempt=2, lane=1)
    (held,) = route_out(plan(0), [Settled(Work(delivery), Held("following x"))], {}, 0)
    items = incoming([source_row(9), as_row(held)], 0, HOLD)
    assert [i.delivery.id for i in items] == [rec(9).id, delivery.id]
    assert (items[0].delivery.attempt, items[0].delivery.lane) == (1, 0)
    # the held one: its identity and attempt, delivered from the main lane, not waiting
    assert (items[1].delivery.offset, items[1].delivery.attempt) == (7, 2)
    assert (items[1].delivery.lane, items[1].not_before_ms, items[1].malformed) == (0, 0, "")
    # without a hold topic, the same row is a source record (siding headers not trusted)
    assert incoming([as_row(held)], 0)[0].delivery.attempt == 1


def test_held_records_are_parked_as_held_and_released_when_done() -> None:
    parking = KeyParking("state")
    parking.apply([ParkEvent((0, b"k"), 3, 1, 0)])
    settled = [
        Settled(Work(rec(5)), Held("following t/0/3")),
        Settled(Work(rec(1)), Done()),
    ]
    assert park_events(plan(0, parking), settled) == (
        ParkEvent((0, b"k"), 5, HELD),
        ParkEvent((0, b"k"), 1, None),
    )


def test_the_main_lane_starts_the_hold_topic_from_its_beginning() -> None:
    got = json.loads(starting_offsets_of({"t": ({0: 5}, "latest"), HOLD: ({}, "earliest")}, 2))
    assert got == {"t": {"0": 5, "1": -1}, HOLD: {"0": -2, "1": -2}}
    assert starting_offsets_of({"t": ({}, "latest")}, 2) == "latest"


# ---- property: batches of the main lane and lane 1 in any interleaving -------------------------


@dataclass
class World:
    """A route in key mode, reduced to what ordering needs: the source, the hold topic, lane 1,
    the key state, and what the consumer ACKed first."""

    fails: set[int]
    parking: KeyParking = field(default_factory=lambda: KeyParking("state"))
    held: list[OutRecord] = field(default_factory=list)
    lane: list[Delivery] = field(default_factory=list)
    acked: list[Delivery] = field(default_factory=list)
    sends: int = 0

    def run(self, lane: int, deliveries: Sequence[Delivery], data: st.DataObject) -> list[Settled]:
        task = plan(lane, self.parking)
        lines = KeyLines(deliveries, Ordering.KEY, task.parked)
        steps: dict[int, Any] = {}
        out: list[int] = []

        def take(released: Released) -> None:
            out.extend(released.send)
            for index, blocker in released.follow:
                steps[index] = follow(blocker)

        take(lines.start())
        while out:
            index = out.pop(data.draw(st.integers(0, len(out) - 1)))
            delivery = deliveries[index]
            self.sends += 1
            if delivery.offset in self.fails and delivery.attempt == 1:
                steps[index] = ToLane(1, 2, 0, "sim: retry")
                take(lines.settle(index, Blocker(delivery.id, 1, 0)))
            else:
                steps[index] = Done()
                self.acked.append(delivery)
                take(lines.settle(index, None))
        settled = [Settled(Work(d), steps[i]) for i, d in enumerate(deliveries)]
        for record in route_out(task, settled, {}, 0):
            if record.topic == HOLD:
                self.held.append(record)
        self.lane += [
            rec(s.work.delivery.offset, s.work.delivery.key or b"", 2, 1)
            for s in settled
            if isinstance(s.step, ToLane)
        ]
        self.parking.apply(park_events(task, settled))
        return settled

    def main(self, source: Sequence[int], data: st.DataObject) -> list[Settled]:
        rows = [as_row(r) for r in self.held] + [source_row(o, b"k%d" % (o % 2)) for o in source]
        self.held = []
        return self.run(0, [i.delivery for i in incoming(rows, 0, HOLD)], data)

    def lane_batch(self, data: st.DataObject) -> None:
        batch, self.lane = self.lane, []
        self.run(1, batch, data)


@settings(deadline=None, max_examples=150)
@given(
    st.integers(1, 40),
    st.sets(st.integers(0, 39)),
    st.lists(st.tuples(st.integers(0, 6), st.booleans()), max_size=30),
    st.data(),
)
def test_followers_wait_for_their_key_keep_attempt_1_and_the_key_comes_back(
    count: int, fails: set[int], schedule: list[tuple[int, bool]], data: st.DataObject
) -> None:
    world = World({f for f in fails if f < count})
    offsets = list(range(count))
    # Source records arrive in chunks; lane 1 runs its batches in between, in any interleaving
    for chunk, lane_too in schedule:
        taken, offsets = offsets[:chunk], offsets[chunk:]
        world.main(taken, data)
        if lane_too:
            world.lane_batch(data)
    world.main(offsets, data)
    # When lane 1 and the main lane take turns (a released record may fail in its turn), each
    # turn finishes at least one failed record: the key drains in a bounded number of turns
    for _ in range(len(world.fails) + 1):
        world.lane_batch(data)
        world.main([], data)
    # Then nothing waits any more, anywhere: the key is back in the main lane
    assert (world.held, world.lane, world.parking.snapshot()) == ([], [], {})
    # Every record was ACKed exactly once, per key in offset order
    assert sorted(d.offset for d in world.acked) == list(range(count))
    for key in (b"k0", b"k1"):
        firsts = [d.offset for d in world.acked if d.key == key]
        assert firsts == sorted(firsts)
    # Only records that failed were charged an attempt
    assert all(d.attempt == (2 if d.offset in world.fails else 1) for d in world.acked)
    # No record was sent more often than its failures make it
    assert world.sends == count + len(world.fails)
    # A new record of the key now goes straight out in the main lane
    (fresh,) = world.main([count], data)
    assert isinstance(fresh.step, Done)
