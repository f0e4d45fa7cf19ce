"""Replay minimisation, the pure parts: offset ranges, progress records, the skip decision, and
a task's tracker with an in-memory writer (docs/replay.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.config import parse_config
from siding.model import Delivery, Ordering, Outcome, OutcomeKind
from siding.pipeline.driver.progress_store import ProgressStore
from siding.pipeline.executor.plan import TaskPlan, build_plan
from siding.pipeline.executor.progress import (
    Known,
    Mark,
    ProgressPlan,
    contains,
    decode,
    done_map,
    encode,
    known_for,
    merge,
    skippable,
    split,
    to_ranges,
)
from siding.pipeline.executor.progress_task import Tracker, known_of_attempt
from siding.pipeline.executor.rows import Incoming, incoming
from siding.pipeline.executor.task import (
    route_out,
    slice_work,
    wait_events,
)
from siding.routing.producer import OutRecord
from tests.unit.test_key_hold import HOLD, World, as_row, source_row
from tests.unit.test_key_hold import plan as key_plan

TOPIC = "orders"


def delivery(offset: int, key: bytes | None = None, topic: str = TOPIC) -> Delivery:
    return Delivery(f"{topic}/0/{offset}", topic, 0, offset, key, b"v")


@pytest.mark.parametrize(
    ("offsets", "ranges"),
    [
        ([], ()),
        ([5], ((5, 6),)),
        ([3, 1, 2, 7, 2], ((1, 4), (7, 8))),
        ([0, 2, 4], ((0, 1), (2, 3), (4, 5))),
    ],
)
def test_offsets_become_compact_ranges(offsets: list[int], ranges: tuple[object, ...]) -> None:
    assert to_ranges(offsets) == ranges


@pytest.mark.parametrize(
    ("parts", "merged"),
    [
        ([((1, 3),), ((3, 5),)], ((1, 5),)),  # adjacent
        ([((1, 4),), ((2, 3),)], ((1, 4),)),  # inside
        ([((7, 9),), ((1, 2),)], ((1, 2), (7, 9))),  # apart, any order
        ([((5, 5),)], ()),  # empty ranges vanish
    ],
)
def test_ranges_merge_into_a_normal_form(
    parts: list[tuple[tuple[int, int], ...]], merged: tuple[object, ...]
) -> None:
    assert merge(*parts) == merged


@given(st.sets(st.integers(0, 300)), st.sets(st.integers(0, 300)), st.integers(-5, 305))
def test_merged_ranges_hold_exactly_the_union(a: set[int], b: set[int], probe: int) -> None:
    merged = merge(to_ranges(a), to_ranges(b))
    assert merged == to_ranges(a | b)
    assert contains(merged, probe) == (probe in a | b)


def test_a_progress_record_reads_back_as_written() -> None:
    known = Known({(TOPIC, 0): ((0, 10), (12, 13))}, {(TOPIC, 1): ((40, 90),)})
    mark = Mark("billing-main", 3, "qid-1", 17, known)
    record = encode("siding.billing.state-progress", mark)
    assert record.key == b"billing-main/3"
    assert decode(record.key or b"", record.value) == mark


@pytest.mark.parametrize("value", [None, b"", b"not json", b'{"v": 99}', b'{"v": 1, "q": "x"}'])
def test_a_tombstone_or_an_unreadable_record_is_no_progress(value: bytes | None) -> None:
    assert decode(b"billing-main/0", value) is None


def test_only_marks_of_the_same_query_run_and_batch_count() -> None:
    def mark(query: str, query_id: str, batch: int, offset: int, task: int = 0) -> Mark:
        return Mark(query, task, query_id, batch, Known({(TOPIC, 0): ((offset, offset + 1),)}))

    marks = [
        mark("main", "q1", 5, 1),
        mark("main", "q1", 5, 2, task=1),
        mark("main", "q1", 4, 3),  # an earlier batch (committed)
        mark("main", "q0", 5, 4),  # the same batch id of a deleted checkpoint
        mark("retry-1", "q1", 5, 6),  # another lane
    ]
    assert known_for(marks, "main", "q1", 5).acked == {(TOPIC, 0): ((1, 3),)}


UNORDERED_KNOWN = Known({(TOPIC, 0): ((0, 2),)}, {(TOPIC, 0): ((5, 6),)})


@pytest.mark.parametrize(
    ("offset", "skipped"),
    [(0, True), (1, True), (2, False), (5, True), (6, False)],
)
def test_unordered_skips_records_acked_or_written(offset: int, skipped: bool) -> None:
    assert (
        skippable(
            delivery(offset), UNORDERED_KNOWN, lane=0, ordering=Ordering.UNORDERED, waiting={}
        )
        is skipped
    )


WAITING_KEY = (0, b"waiting")


@pytest.mark.parametrize(
    ("case", "key", "lane", "skipped"),
    [
        ("acked, key not waiting, main lane", b"k", 0, True),
        ("acked, no key", None, 2, True),
        (
            "acked, but its key is waiting: its release must reach the key state",
            b"waiting",
            0,
            False,
        ),
        ("acked in a retry lane: its release must reach the key state", b"k", 1, False),
    ],
)
def test_key_mode_skips_only_acks_that_tell_the_key_state_nothing(
    case: str, key: bytes | None, lane: int, skipped: bool
) -> None:
    known = Known({(TOPIC, 0): ((0, 1),)})
    waiting = {WAITING_KEY: ()}
    got = skippable(delivery(0, key), known, lane=lane, ordering=Ordering.KEY, waiting=waiting)
    assert got is skipped, case


def test_key_mode_never_skips_a_record_written_to_a_lane_or_held() -> None:
    # Its key must stay blocked behind it: the replay dispatches it again and reports it
    known = Known({}, {(TOPIC, 0): ((0, 1),)})
    assert not skippable(delivery(0, b"k"), known, lane=0, ordering=Ordering.KEY, waiting={})


def test_split_keeps_input_order_and_nothing_is_skipped_without_progress() -> None:
    items = [delivery(o) for o in (4, 0, 5, 1)]
    keep, skip = split(items, UNORDERED_KNOWN, lane=0, ordering=Ordering.UNORDERED, waiting={})
    assert (keep, skip) == ([0], [1, 2, 3])
    assert split(items, Known(), lane=0, ordering=Ordering.UNORDERED, waiting={}) == (
        [0, 1, 2, 3],
        [],
    )


# --- a task's tracker ---------------------------------------------------------------------


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def task_plan(ordering: str = "unordered", known: Known | None = None) -> TaskPlan:
    text = f"""
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "billing"
topic = "{TOPIC}"
group = "billing"
ordering = "{ordering}"
endpoint = "grpc://127.0.0.1:50051"
"""
    route = parse_config(text, env={}).route[0]
    progress = ProgressPlan("progress", "billing-main", "qid", 7, 0.02, known or Known())
    return build_plan(route, 0, {}, 1, {}, progress=progress)


def tracker_with(
    plan: TaskPlan, written: list[OutRecord], loop: asyncio.AbstractEventLoop | None = None
) -> Tracker:
    return Tracker(plan.progress, 2, written.append, loop)


def marks(written: list[OutRecord]) -> list[Mark]:
    return [m for r in written if (m := decode(r.key or b"", r.value)) is not None]


def test_a_finished_task_records_its_whole_slice_and_carries_what_was_known() -> None:
    # Given a replay where offset 0 of the slice was ACKed by an earlier attempt
    plan = task_plan(known=Known({(TOPIC, 0): ((0, 1),)}))
    written: list[OutRecord] = []
    tracker = tracker_with(plan, written)
    items = [Incoming(delivery(o)) for o in range(4)]
    # When the task screens its slice, gets one ACK, and its lane/DLQ writes succeed
    kept = tracker.screen(plan, items)
    tracker.acked(delivery(1))
    tracker.written(plan)
    # Then offset 0 is not dispatched, and the last record says the whole slice is durable
    assert [i.delivery.offset for i in kept] == [1, 2, 3]
    assert tracker.skipped == 1
    last = marks(written)[-1]
    assert (last.query, last.task, last.query_id, last.batch) == ("billing-main", 2, "qid", 7)
    assert last.known.written == {(TOPIC, 0): ((0, 4),)}
    assert last.known.acked == {(TOPIC, 0): ((0, 2),)}


def test_key_mode_records_acks_only() -> None:
    plan = task_plan("key")
    written: list[OutRecord] = []
    tracker = tracker_with(plan, written)
    tracker.screen(plan, [Incoming(delivery(o, b"k")) for o in range(3)])
    tracker.acked(delivery(0, b"k"))
    tracker.written(plan)
    assert [m.known for m in marks(written)] == [Known({(TOPIC, 0): ((0, 1),)}, {})]


def test_acks_are_written_on_the_timer_only_when_they_changed(
    loop: asyncio.AbstractEventLoop,
) -> None:
    plan = task_plan()
    written: list[OutRecord] = []
    tracker = tracker_with(plan, written, loop)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(3)])
    tracker.acked(delivery(0))
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0.2), loop).result()
    # One record for the one change, however many ticks passed (interval 20 ms)
    assert [m.known.acked for m in marks(written)] == [{(TOPIC, 0): ((0, 1),)}]
    tracker.close()
    # Closed: nothing more is written, not even by a late ACK
    tracker.acked(delivery(1))
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0.1), loop).result()
    assert len(written) == 1


def test_a_progress_write_that_fails_does_not_fail_the_task() -> None:
    plan = task_plan()

    def refuse(_record: OutRecord) -> None:
        raise BufferError("queue full")

    tracker = Tracker(plan.progress, 0, refuse)
    tracker.screen(plan, [Incoming(delivery(0))])
    tracker.acked(delivery(0))
    tracker.written(plan)  # logs, does not raise


def test_the_watched_transport_reports_acks_only() -> None:
    class Answers:
        async def send(self, d: Delivery, deadline_s: float) -> Outcome:
            assert deadline_s == 1.0
            return Outcome(OutcomeKind.ACK if d.offset % 2 == 0 else OutcomeKind.RETRY)

        async def probe(self) -> bool:
            return True

        async def close(self) -> None:
            return None

    plan = task_plan("key")  # key mode: the record holds ACKs only
    written: list[OutRecord] = []
    tracker = tracker_with(plan, written)
    tracker.screen(plan, [Incoming(delivery(o)) for o in range(4)])
    watched = tracker.watch(Answers())

    async def send_all() -> None:
        for offset in range(4):
            await watched.send(delivery(offset), 1.0)

    asyncio.run(send_all())
    tracker.written(plan)
    assert [m.known.acked for m in marks(written)] == [{(TOPIC, 0): ((0, 1), (2, 3))}]


def test_a_disabled_tracker_changes_nothing() -> None:
    tracker = Tracker(None, 0)
    items = [Incoming(delivery(0))]
    assert tracker.screen(task_plan(), items) == items
    transport = object()
    assert tracker.watch(transport) is transport  # type: ignore[arg-type]


def test_a_task_run_again_by_spark_reads_what_its_earlier_attempt_recorded() -> None:
    plan = ProgressPlan("progress", "billing-main", "qid", 7, 0.25, Known({(TOPIC, 0): ((0, 1),)}))
    earlier = encode("progress", Mark("billing-main", 0, "qid", 7, Known({(TOPIC, 0): ((1, 5),)})))
    records = [(earlier.key or b"", earlier.value)]
    assert known_of_attempt(plan, 0, lambda: records) == plan.known
    assert known_of_attempt(plan, 1, lambda: records).acked == {(TOPIC, 0): ((0, 5),)}

    def broken() -> list[tuple[bytes, bytes | None]]:
        raise RuntimeError("broker down")

    assert known_of_attempt(plan, 1, broken) == plan.known


def test_the_driver_keeps_the_latest_record_per_task_and_forgets_tombstones() -> None:
    def record(task: int, offsets: range) -> tuple[bytes, bytes | None]:
        out = encode("p", Mark("main", task, "q", 3, Known(done_map(delivery(o) for o in offsets))))
        return out.key or b"", out.value

    batches = [[record(0, range(0, 2)), record(1, range(10, 12))], [record(0, range(0, 5))]]
    store = ProgressStore("p", lambda: batches.pop(0) if batches else [])
    store.catch_up()
    store.catch_up()
    assert store.known("main", "q", 3).acked == {(TOPIC, 0): ((0, 5), (10, 12))}
    batches.append([(b"main/1", None)])
    store.catch_up()
    assert store.known("main", "q", 3).acked == {(TOPIC, 0): ((0, 5),)}


# --- key mode: crashes and replays with the skip rule, against the real key state --------------


@dataclass
class ReplayWorld(World):
    """``World`` of test_key_hold, where a main-lane batch may crash after some of its ACKs were
    recorded: its hold writes and key-state events are lost, and it runs again with the same
    records, leaving out what ``skippable`` allows."""

    known: Known = field(default_factory=Known)

    def batch(self, source: Sequence[int], data: st.DataObject, *, crash: bool) -> bool:
        held_before = list(self.held)
        self.clock += 1
        rows = [as_row(r) for r in self.held] + [source_row(o, b"k%d" % (o % 2)) for o in source]
        self.held = []
        task = key_plan(0, self.waits)
        items = incoming(rows, 0, HOLD)
        keep, _ = split(
            [i.delivery for i in items],
            self.known,
            lane=0,
            ordering=Ordering.KEY,
            waiting=task.waiting,
        )
        items = [items[i] for i in keep]
        work = slice_work(task, items, set())
        acked_before = len(self.acked)
        settled = self.dispatch(task, work, data)
        if crash:
            # The ACKs recorded before the crash: the earliest ones (written in time order)
            new = self.acked[acked_before:]
            recorded = new[: data.draw(st.integers(0, len(new)))]
            self.known = self.known.union(Known(done_map(recorded)))
            self.held = held_before
            return False
        self.held += [r for r in route_out(task, settled, {}, self.clock) if r.topic == HOLD]
        self.waits.apply(wait_events(task, settled))
        self.known = Known()  # committed: the next batch starts without progress
        return True


@settings(deadline=None, max_examples=150)
@given(
    st.integers(1, 30),
    st.dictionaries(st.integers(0, 29), st.integers(1, 2)),
    st.lists(st.integers(0, 6), max_size=20),
    st.data(),
)
def test_key_mode_replays_that_skip_acked_records_keep_key_order_and_drain(
    count: int, fails: dict[int, int], chunks: list[int], data: st.DataObject
) -> None:
    world = ReplayWorld({o: n for o, n in fails.items() if o < count})
    offsets = list(range(count))
    crashes = 4
    for chunk in [*chunks, count]:
        taken, offsets = offsets[:chunk], offsets[chunk:]
        while not world.batch(taken, data, crash=crashes > 0 and data.draw(st.booleans())):
            crashes -= 1
    for _ in range(5 * (len(world.fails) + 1)):
        world.batch([], data, crash=False)
    # Then nothing waits any more, and no key is left blocked
    assert (world.held, world.waits.snapshot()) == ([], {})
    # Every record was ACKed; per key, the first ACKs came in offset order
    assert {d.offset for d in world.acked} == set(range(count))
    for key in (b"k0", b"k1"):
        firsts: list[int] = []
        for d in world.acked:
            if d.key == key and d.offset not in firsts:
                firsts.append(d.offset)
        assert firsts == sorted(firsts)
