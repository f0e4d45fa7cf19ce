"""Key ordering: which items of a slice may be sent now, and which must wait behind an earlier one.

Pure rules (no I/O): the dispatcher asks ``KeyLines`` what to send and tells it what happened.
The rules are written down in docs/dispatch.md ("Key ordering").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from siding.model import Delivery, Lane, Ordering, delivery_id
from siding.steps import Held

OrderKey = tuple[int, bytes]
"""(partition, key): the unit of ordering in ``key`` mode."""


@dataclass(frozen=True, slots=True)
class WaitingRecord:
    """A record of some key that waits out of the line: in retry lane ``lane`` until
    ``not_before_ms``, or held behind an earlier one (``lane == HELD``). Later records of its
    key wait behind it. (Not a parked *call*: key mode never parks, docs/parking.md.)"""

    offset: int
    lane: int
    not_before_ms: int


HELD = 0
"""The ``lane`` of a ``WaitingRecord`` that is a held follower, not a record in a retry lane."""


@dataclass(frozen=True, slots=True)
class Blocker:
    """An earlier record of the key that is out of the line (in a retry lane or held): later
    ones must wait for it."""

    id: str
    lane: int
    not_before_ms: int


@dataclass(frozen=True, slots=True)
class Released:
    """What became decidable: ``send`` (indices to deliver) and ``follow`` (index, its blocker)."""

    send: tuple[int, ...] = ()
    follow: tuple[tuple[int, Blocker], ...] = ()


def order_key(delivery: Delivery, ordering: Ordering) -> OrderKey | None:
    """The ordering key of a delivery; ``None`` when it may go in any order."""
    if ordering is not Ordering.KEY or delivery.key is None:
        return None
    return (delivery.partition, delivery.key)


def first_attempt_of_lane(lane: int, lanes: Sequence[Lane]) -> int:
    """The attempt number a record has when it enters ``lane`` (the main lane takes attempt 1)."""
    if lane <= 0:
        return 1
    return 2 + sum(spec.attempts for spec in lanes[: lane - 1])


def combine(a: Blocker | None, b: Blocker | None) -> Blocker | None:
    """One blocker that is at least as far as both: the higher lane, the later not-before."""
    if a is None:
        return b
    return _at_least(a, b)


def _at_least(a: Blocker, b: Blocker | None) -> Blocker:
    if b is None:
        return a
    lead = a if a.lane >= b.lane else b
    return Blocker(lead.id, lead.lane, max(a.not_before_ms, b.not_before_ms))


def waiting_blocker(
    delivery: Delivery, waiting: Sequence[WaitingRecord], in_slice: Collection[int] = ()
) -> Blocker | None:
    """The blocker made of the waiting records of the key with smaller offsets.

    Waiting records whose offset is in this slice (``in_slice``) are the items being retried now:
    the order inside the slice covers them.
    """
    earlier = [p for p in waiting if p.offset < delivery.offset and p.offset not in in_slice]
    if not earlier:
        return None
    # The nearest record in the highest lane is the one to name in the reason.
    lead = max(earlier, key=lambda p: (p.lane, p.offset))
    blocker_id = delivery_id(delivery.topic, delivery.partition, lead.offset)
    return Blocker(blocker_id, lead.lane, max(p.not_before_ms for p in earlier))


def follow(blocker: Blocker) -> Held:
    """The step of an item that must not be sent because an earlier record of its key is out of
    the line (``blocker``): it is held, its attempt and lane unchanged (it has not failed), and
    becomes due as soon as nothing earlier of its key waits."""
    return Held(f"following {blocker.id}")


@dataclass(slots=True)
class _Line:
    queue: deque[int]
    pending: int | None = None
    # Its records behind a blocker were held: the key waits for an earlier record.
    blocked: bool = False


class KeyLines:
    """The send order of one slice.

    In ``key`` mode each ``OrderKey`` is a line in offset order: only its head is out at a time;
    when the head settles, the next one is released, unless the head went to a retry lane or the
    next one has an earlier record waiting outside the slice (in a lane or held): then it and all
    behind it follow (they are held).
    Items without a key (and every item in ``unordered`` mode) are released at once.
    """

    def __init__(
        self,
        deliveries: Sequence[Delivery],
        ordering: Ordering,
        waiting: Mapping[OrderKey, Sequence[WaitingRecord]] | None = None,
    ) -> None:
        self._deliveries = deliveries
        self._waiting = waiting or {}
        self._free: list[int] = []
        self._lines: dict[OrderKey, _Line] = {}
        self._line_of: dict[int, OrderKey] = {}
        keyed: dict[OrderKey, list[int]] = {}
        for index, delivery in enumerate(deliveries):
            key = order_key(delivery, ordering)
            if key is None:
                self._free.append(index)
            else:
                keyed.setdefault(key, []).append(index)
                self._line_of[index] = key
        self._in_slice: dict[OrderKey, frozenset[int]] = {}
        for key, indices in keyed.items():
            indices.sort(key=lambda i: (deliveries[i].offset, i))
            self._lines[key] = _Line(deque(indices))
            self._in_slice[key] = frozenset(deliveries[i].offset for i in indices)

    def start(self) -> Released:
        """What may go at once: the free items and the head of every line."""
        send = list(self._free)
        follows: list[tuple[int, Blocker]] = []
        for key in self._lines:
            released = self._advance(key, None)
            send.extend(released.send)
            follows.extend(released.follow)
        return Released(tuple(send), tuple(follows))

    def settle(self, index: int, moved_to: Blocker | None) -> Released:
        """Item ``index`` has its final step; ``moved_to`` when that step sent it to a lane."""
        key = self._line_of.get(index)
        if key is None:
            return Released()
        line = self._lines[key]
        if line.pending != index:
            raise ValueError(f"item {index} is not the one out for its key")
        line.pending = None
        return self._advance(key, moved_to)

    def free_lines(self) -> int:
        """The lines that are done: nothing of them out, left or held (their keys' next records
        may go as soon as they come)."""
        return sum(
            1
            for line in self._lines.values()
            if not line.queue and line.pending is None and not line.blocked
        )

    def _advance(self, key: OrderKey, blocker: Blocker | None) -> Released:
        line = self._lines[key]
        if blocker is not None:
            line.blocked = True
        if not line.queue:
            return Released()
        waiting = self._waiting.get(key, ())
        in_slice = self._in_slice[key]
        head = line.queue[0]
        head_blocker = combine(blocker, waiting_blocker(self._deliveries[head], waiting, in_slice))
        if head_blocker is None:
            line.pending = line.queue.popleft()
            return Released(send=(head,))
        # Once the head is blocked, so is everyone behind it (their offsets are larger).
        follows = tuple(
            (i, _at_least(head_blocker, waiting_blocker(self._deliveries[i], waiting, in_slice)))
            for i in line.queue
        )
        line.queue.clear()
        line.blocked = True
        return Released(follow=follows)


@dataclass(frozen=True, slots=True)
class WaitEvent:
    """Key mode: ``lane is None``: the record stopped waiting (ACKed or dead); else it waits in
    ``lane`` (``keyorder.HELD``: it is held behind an earlier record of its key)."""

    key: OrderKey
    offset: int
    lane: int | None
    not_before_ms: int = 0
