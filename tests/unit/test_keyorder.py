"""Key ordering rules: per-key lines, followers of a retried record, waiting records."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.keyorder import (
    HELD,
    Blocker,
    KeyLines,
    OrderKey,
    Released,
    WaitingRecord,
    first_attempt_of_lane,
    follow,
    order_key,
    waiting_blocker,
)
from siding.model import Delivery, Lane, Ordering, delivery_id
from siding.policy import lane_for_attempt
from siding.steps import Held

TOPIC = "trips"
LANES = (Lane(1.0, 5.0, attempts=2), Lane(10.0, 5.0, attempts=1), Lane(60.0, 5.0, attempts=3))
NOW = 1_700_000_000_000


def rec(offset: int, key: bytes | None = b"k", partition: int = 0, attempt: int = 1) -> Delivery:
    return Delivery(
        id=delivery_id(TOPIC, partition, offset),
        topic=TOPIC,
        partition=partition,
        offset=offset,
        key=key,
        value=b"v",
        attempt=attempt,
    )


def test_order_key_only_in_key_mode_and_only_with_a_key() -> None:
    assert order_key(rec(1, b"a", partition=3), Ordering.KEY) == (3, b"a")
    assert order_key(rec(1, None), Ordering.KEY) is None
    assert order_key(rec(1, b"a"), Ordering.UNORDERED) is None


@pytest.mark.parametrize(("lane", "first"), [(0, 1), (1, 2), (2, 4), (3, 5)])
def test_first_attempt_of_lane(lane: int, first: int) -> None:
    assert first_attempt_of_lane(lane, LANES) == first
    # consistent with the policy's own numbering
    assert lane_for_attempt(first, LANES) == lane
    if first > 1:
        assert lane_for_attempt(first - 1, LANES) == lane - 1


def test_waiting_blocker_takes_the_highest_lane_and_latest_not_before() -> None:
    waiting = [
        WaitingRecord(3, 1, NOW + 500),
        WaitingRecord(5, 2, NOW + 100),
        WaitingRecord(9, 3, 0),
    ]
    blocker = waiting_blocker(rec(7), waiting)
    assert blocker == Blocker(delivery_id(TOPIC, 0, 5), 2, NOW + 500)


@pytest.mark.parametrize(
    ("offset", "in_slice", "expected"),
    [
        (2, (), None),  # earlier than every waiting record
        (3, (), None),  # it IS the waiting record: being retried now
        (4, (3,), None),  # the waiting record 3 is in this slice: the slice order covers it
        (4, (), Blocker(delivery_id(TOPIC, 0, 3), 1, NOW)),
    ],
)
def test_waiting_blocker_table(
    offset: int, in_slice: tuple[int, ...], expected: Blocker | None
) -> None:
    assert waiting_blocker(rec(offset), [WaitingRecord(3, 1, NOW)], in_slice) == expected


@pytest.mark.parametrize(
    "blocker",
    [Blocker("b", 1, NOW), Blocker("b", 3, NOW + 60_000), Blocker("b", HELD, 0)],
)
def test_a_follower_is_held_whatever_its_blocker(blocker: Blocker) -> None:
    # No lane, no attempt, no delay: it waits for its key only (issue 19)
    assert follow(blocker) == Held("following b")


def test_unordered_releases_everything_at_once() -> None:
    lines = KeyLines([rec(1), rec(2), rec(3)], Ordering.UNORDERED)
    assert lines.start() == Released(send=(0, 1, 2))
    assert lines.settle(1, Blocker("x", 1, NOW)) == Released()


def test_key_mode_releases_one_per_key_in_offset_order() -> None:
    # Given two keys and a null key, out of offset order in the input
    items = [rec(5, b"a"), rec(2, b"a"), rec(3, b"b"), rec(4, None), rec(9, b"a")]
    lines = KeyLines(items, Ordering.KEY)
    # Then the null key and the first of each key go first
    assert sorted(lines.start().send) == [1, 2, 3]
    # When a's first settles as done, its next one in offset order goes
    assert lines.settle(1, None) == Released(send=(0,))
    assert lines.settle(0, None) == Released(send=(4,))
    assert lines.settle(4, None) == Released()


def test_retried_record_makes_the_rest_of_its_key_follow() -> None:
    items = [rec(1, b"a"), rec(2, b"a"), rec(3, b"a"), rec(4, b"b")]
    lines = KeyLines(items, Ordering.KEY)
    assert sorted(lines.start().send) == [0, 3]
    blocker = Blocker(items[0].id, 1, NOW + 1000)
    assert lines.settle(0, blocker) == Released(follow=((1, blocker), (2, blocker)))
    # key b is not affected
    assert lines.settle(3, blocker) == Released()


def test_dead_record_does_not_block_its_key() -> None:
    lines = KeyLines([rec(1), rec(2)], Ordering.KEY)
    lines.start()
    assert lines.settle(0, None) == Released(send=(1,))


def test_waiting_records_block_later_offsets_but_not_earlier_ones() -> None:
    # Given key k has record 5 waiting in lane 2
    key: OrderKey = (0, b"k")
    waiting = {key: [WaitingRecord(5, 2, NOW + 3000)]}
    lines = KeyLines([rec(4), rec(6), rec(7)], Ordering.KEY, waiting)
    # Then 4 (before the waiting one) goes, and 6, 7 wait for it
    assert lines.start() == Released(send=(0,))
    # When 4 is done, 6 and 7 follow the waiting record
    released = lines.settle(0, None)
    waiting_blocker_5 = Blocker(delivery_id(TOPIC, 0, 5), 2, NOW + 3000)
    assert released == Released(follow=((1, waiting_blocker_5), (2, waiting_blocker_5)))


def test_followers_of_a_waiting_record_wait_for_a_higher_in_slice_blocker() -> None:
    # Given 5 waiting in lane 1, and 4 in the slice which goes to lane 3
    waiting = {(0, b"k"): [WaitingRecord(5, 1, NOW)]}
    lines = KeyLines([rec(4), rec(6)], Ordering.KEY, waiting)
    assert lines.start() == Released(send=(0,))
    released = lines.settle(0, Blocker("r4", 3, NOW + 60_000))
    # Then 6 follows to lane 3, not lane 1 (it must not overtake 4)
    assert released == Released(follow=((1, Blocker("r4", 3, NOW + 60_000)),))


def test_the_waiting_record_itself_is_sent_after_earlier_waiting_ones_in_the_slice() -> None:
    # A lane slice holding waiting records 3 and 5 of the key: 3 goes first, then 5
    waiting = {(0, b"k"): [WaitingRecord(3, 1, NOW), WaitingRecord(5, 1, NOW)]}
    lines = KeyLines([rec(5), rec(3)], Ordering.KEY, waiting)
    assert lines.start() == Released(send=(1,))
    assert lines.settle(1, None) == Released(send=(0,))


def test_free_lines_are_the_keys_done_with_nothing_out_left_or_held() -> None:
    # Given keys a (two records), b (one, which goes to a lane), c (one waiting record before it
    # outside the slice) and a null key (not a line)
    waiting = {(0, b"c"): [WaitingRecord(1, 1, NOW)]}
    items = [rec(2, b"a"), rec(3, b"a"), rec(4, b"b"), rec(5, b"c"), rec(6, None)]
    lines = KeyLines(items, Ordering.KEY, waiting)
    lines.start()
    # Then none is free yet: a and b have a record out, c is held
    assert lines.free_lines() == 0
    lines.settle(0, None)
    assert lines.free_lines() == 0  # a's second record is out now
    lines.settle(1, None)
    assert lines.free_lines() == 1  # a is done
    # b's record went to a lane: b is blocked, not free
    lines.settle(2, Blocker(items[2].id, 1, NOW + 1000))
    assert lines.free_lines() == 1


def test_settling_an_item_that_is_not_out_is_a_bug() -> None:
    lines = KeyLines([rec(1), rec(2)], Ordering.KEY)
    lines.start()
    with pytest.raises(ValueError, match="not the one out"):
        lines.settle(1, None)


# ---- property: simulate a dispatcher on top of KeyLines with arbitrary outcomes and timing ----


@dataclass
class Sim:
    items: list[Delivery]
    waiting: dict[OrderKey, list[WaitingRecord]]
    sent: list[int] = field(default_factory=list)
    moved: dict[int, Blocker] = field(default_factory=dict)
    followed: dict[int, Blocker] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    out: list[int] = field(default_factory=list)

    def check_send(self, index: int) -> None:
        """No earlier record of the key may be out, waiting, or gone to a lane."""
        item = self.items[index]
        if item.key is None:
            return
        key = (item.partition, item.key)
        same_key = [j for j, d in enumerate(self.items) if (d.partition, d.key) == key]
        in_slice = {self.items[j].offset for j in same_key}
        for p in self.waiting.get(key, []):
            assert not (p.offset < item.offset and p.offset not in in_slice), "waiting earlier"
        for j in same_key:
            if self.items[j].offset < item.offset:
                assert j in self.done, "an earlier record is out or went to a lane"


keyed_items = st.lists(
    st.tuples(st.sampled_from([b"a", b"b", b"c", None]), st.integers(0, 1)),
    min_size=1,
    max_size=25,
)


@settings(deadline=None)
@given(
    keyed_items,
    # lane HELD (0): a record held behind an earlier one, read back in this slice or not
    st.lists(st.tuples(st.sampled_from([b"a", b"b"]), st.integers(0, 60), st.integers(0, 3))),
    st.data(),
)
def test_per_key_sends_are_in_offset_order_and_never_overtake(
    shape: list[tuple[bytes | None, int]],
    waiting_shape: list[tuple[bytes, int, int]],
    data: st.DataObject,
) -> None:
    items = [rec(offset * 2, key, partition) for offset, (key, partition) in enumerate(shape)]
    waiting: dict[OrderKey, list[WaitingRecord]] = {}
    for key, offset, lane in waiting_shape:
        waiting.setdefault((0, key), []).append(WaitingRecord(offset, lane, NOW + offset))
    sim = Sim(items, waiting)
    lines = KeyLines(items, Ordering.KEY, waiting)

    def take(released: Released) -> None:
        for index in released.send:
            sim.check_send(index)
            sim.sent.append(index)
            sim.out.append(index)
        for index, blocker in released.follow:
            assert index not in sim.followed
            sim.followed[index] = blocker

    take(lines.start())
    while sim.out:
        index = sim.out.pop(data.draw(st.integers(0, len(sim.out) - 1)))
        if data.draw(st.booleans()):
            blocker = Blocker(items[index].id, data.draw(st.integers(1, 3)), NOW)
            sim.moved[index] = blocker
            take(lines.settle(index, blocker))
        else:
            sim.done.add(index)
            take(lines.settle(index, None))

    # Every item was either sent (and settled) or made to follow, exactly once
    assert sorted(sim.sent + list(sim.followed)) == list(range(len(items)))
    # Per key, sends are in offset order
    by_key: dict[tuple[int, bytes], list[int]] = {}
    for index in sim.sent:
        item = items[index]
        if item.key is not None:
            by_key.setdefault((item.partition, item.key), []).append(item.offset)
    assert all(offsets == sorted(offsets) for offsets in by_key.values())
    # A follower goes at least as far as every earlier record of its key that went to a lane
    for index, blocker in sim.followed.items():
        item = items[index]
        for j, earlier in sim.moved.items():
            same = (items[j].partition, items[j].key) == (item.partition, item.key)
            if same and items[j].offset < item.offset:
                assert blocker.lane >= earlier.lane
                assert blocker.not_before_ms >= earlier.not_before_ms
