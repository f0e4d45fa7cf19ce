"""Pure: what a batch already finished, kept so that a replayed batch skips it (docs/replay.md).

A task records, per source record of its slice, whether it has a durable outcome: ACKed by the
consumer (``acked``), or written with its lane, DLQ, park or hold record (``written``, the whole
slice once the task's writes were acknowledged). Records are named by their origin (topic,
partition, offset: the delivery id), as compact half-open offset ranges.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from siding.dispatch.keyorder import OrderKey, order_key
from siding.model import Delivery, Ordering
from siding.routing.producer import OutRecord

Ranges = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-adjacent half-open ``[start, end)`` offset ranges."""
Coord = tuple[str, int]
DoneMap = Mapping[Coord, Ranges]

VERSION = 1


def to_ranges(offsets: Iterable[int]) -> Ranges:
    """The offsets as ranges: ``{1, 2, 3, 7}`` -> ``((1, 4), (7, 8))``."""
    out: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if out and out[-1][1] == offset:
            out[-1] = (out[-1][0], offset + 1)
        else:
            out.append((offset, offset + 1))
    return tuple(out)


def merge(*parts: Iterable[tuple[int, int]]) -> Ranges:
    """The union of range lists (any order, overlapping or adjacent), normalised."""
    spans = sorted((s, e) for part in parts for s, e in part if e > s)
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def contains(ranges: Ranges, offset: int) -> bool:
    index = bisect.bisect_right(ranges, (offset, 2**63)) - 1
    return index >= 0 and ranges[index][0] <= offset < ranges[index][1]


def merge_maps(*maps: DoneMap) -> dict[Coord, Ranges]:
    out: dict[Coord, Ranges] = {}
    for done in maps:
        for coord, ranges in done.items():
            out[coord] = merge(out.get(coord, ()), ranges)
    return out


def covers(done: DoneMap, part: DoneMap) -> bool:
    """Whether every offset of ``part`` is in ``done`` already."""
    return all(
        merge(done.get(coord, ()), ranges) == merge(done.get(coord, ()))
        for coord, ranges in part.items()
    )


def done_map(deliveries: Iterable[Delivery]) -> dict[Coord, Ranges]:
    """The origins of ``deliveries`` as ranges per (topic, partition)."""
    offsets: dict[Coord, list[int]] = {}
    for delivery in deliveries:
        offsets.setdefault((delivery.topic, delivery.partition), []).append(delivery.offset)
    return {coord: to_ranges(found) for coord, found in offsets.items()}


def has(done: DoneMap, delivery: Delivery) -> bool:
    ranges = done.get((delivery.topic, delivery.partition))
    return ranges is not None and contains(ranges, delivery.offset)


@dataclass(frozen=True)
class Known:
    """What earlier attempts of one batch made durable: ACKed records, and records written
    to a lane, the DLQ, the park or the hold topic (every record of a finished task)."""

    acked: DoneMap = field(default_factory=dict)
    written: DoneMap = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.acked or self.written)

    def union(self, other: Known) -> Known:
        return Known(merge_maps(self.acked, other.acked), merge_maps(self.written, other.written))


def restrict(known: Known, deliveries: Iterable[Delivery]) -> Known:
    """What ``known`` says of ``deliveries`` only."""
    chosen = list(deliveries)
    acked = done_map(d for d in chosen if has(known.acked, d))
    return Known(acked, done_map(d for d in chosen if has(known.written, d)))


def skippable(
    delivery: Delivery,
    known: Known,
    *,
    lane: int,
    ordering: Ordering,
    waiting: Mapping[OrderKey, object],
) -> bool:
    """Whether a replayed batch may leave ``delivery`` out: its outcome is durable, and leaving
    it out changes nothing else. In key mode only an ACK counts, and only where the ACK would
    report nothing to the key state (no key, or the main lane with nothing of the key waiting):
    a record moved to a lane or held must be dispatched again so its key stays blocked behind
    it, and a release must reach the key state."""
    if ordering is Ordering.UNORDERED:
        return has(known.acked, delivery) or has(known.written, delivery)
    if not has(known.acked, delivery):
        return False
    key = order_key(delivery, ordering)
    return key is None or (lane == 0 and key not in waiting)


def split(
    deliveries: Sequence[Delivery],
    known: Known,
    *,
    lane: int,
    ordering: Ordering,
    waiting: Mapping[OrderKey, object],
) -> tuple[list[int], list[int]]:
    """Indexes of ``deliveries`` to dispatch, and of those to skip."""
    if not known:
        return list(range(len(deliveries))), []
    keep: list[int] = []
    skip: list[int] = []
    for index, delivery in enumerate(deliveries):
        done = skippable(delivery, known, lane=lane, ordering=ordering, waiting=waiting)
        (skip if done else keep).append(index)
    return keep, skip


@dataclass(frozen=True)
class Mark:
    """One progress record: what task ``task`` of batch ``batch`` of query ``query`` (Spark's
    query id ``query_id``: a new checkpoint is another query) made durable so far."""

    query: str
    task: int
    query_id: str
    batch: int
    known: Known

    @property
    def key(self) -> bytes:
        return f"{self.query}/{self.task}".encode()


def _encode_map(done: DoneMap) -> list[list[object]]:
    return [[t, p, [list(r) for r in ranges]] for (t, p), ranges in sorted(done.items()) if ranges]


def _decode_map(rows: object) -> dict[Coord, Ranges]:
    if not isinstance(rows, list):
        raise ValueError("expected a list")
    out: dict[Coord, Ranges] = {}
    for topic, partition, ranges in rows:
        out[(str(topic), int(partition))] = merge((int(s), int(e)) for s, e in ranges)
    return out


def encode(topic: str, mark: Mark) -> OutRecord:
    value = {
        "v": VERSION,
        "q": mark.query_id,
        "b": mark.batch,
        "a": _encode_map(mark.known.acked),
        "w": _encode_map(mark.known.written),
    }
    return OutRecord(topic, mark.key, json.dumps(value, separators=(",", ":")).encode(), ())


def decode(key: bytes, value: bytes | None) -> Mark | None:
    """A progress record, or ``None`` for a tombstone or a record this version cannot read
    (forgetting progress only costs duplicates, never a loss)."""
    if not value:
        return None
    try:
        query, _, task = key.decode().rpartition("/")
        data = json.loads(value)
        if data.get("v") != VERSION or not query:
            return None
        known = Known(_decode_map(data["a"]), _decode_map(data["w"]))
        return Mark(query, int(task), str(data["q"]), int(data["b"]), known)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def known_for(marks: Iterable[Mark], query: str, query_id: str, batch: int) -> Known:
    """What every task of one batch recorded (marks of other batches or queries are stale)."""
    known = Known()
    for mark in marks:
        if (mark.query, mark.query_id, mark.batch) == (query, query_id, batch):
            known = known.union(mark.known)
    return known


def write_now(unwritten: int, *, every: int, answered: int, expected: int) -> bool:
    """Whether a task writes its progress at once rather than at the next tick: ``unwritten``
    ACKs are in no record yet, and either they are ``every`` or more (0: no count), or each
    of the ``expected`` calls of the slice has answered (a burst whose ACKs all came within a
    tick is recorded as soon as they are in). The tick writes the rest (docs/replay.md)."""
    if unwritten <= 0:
        return False
    return (every > 0 and unwritten >= every) or (expected > 0 and answered >= expected)


@dataclass(frozen=True)
class ProgressPlan:
    """What a task needs to record its progress and to skip what is known done: the topic,
    the batch, and when to write (every ``interval_s``, and every ``every`` ACKs)."""

    topic: str
    query: str
    query_id: str
    batch: int
    interval_s: float
    known: Known = field(default_factory=Known)
    every: int = 0
