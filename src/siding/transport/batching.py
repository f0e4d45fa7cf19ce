"""Gather concurrent sends into batches: by count, by size and by time (docs/batch.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from siding.errors import ConfigError
from siding.model import Outcome
from siding.transport.outcomes import outcome_from_timeout

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """A batch leaves once it holds ``max_items``, once the next item would take it past
    ``max_bytes`` (an item larger than that goes alone), or ``linger_s`` after its first item."""

    max_items: int
    linger_s: float
    max_bytes: int

    def __post_init__(self) -> None:
        if self.max_items < 1:
            raise ConfigError("batch.max", "must be at least 1")
        if self.linger_s < 0:
            raise ConfigError("batch.linger", "must not be negative")
        if self.max_bytes < 1:
            raise ConfigError("batch.max_bytes", "must be at least 1")


class Gatherer(Generic[T]):
    """Collects items and hands each full (or lingered) batch to ``flush``, in arrival order.

    Two items with the same ``key`` never share a batch (an answer names its delivery by id, so
    two copies in one batch could not be told apart): the second starts the next batch.
    Synchronous; the linger timer runs on the event loop that added the first item. A linger of
    0 never waits: the batch leaves on the loop's next turn with the items added before it
    (one callback per batch, nothing that re-arms itself).
    """

    def __init__(self, limits: BatchLimits, flush: Callable[[list[T]], None]) -> None:
        self.limits = limits
        self._flush = flush
        self._items: list[T] = []
        self._keys: set[Hashable] = set()
        self._bytes = 0
        self._timer: asyncio.Handle | None = None

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T, size: int, key: Hashable = None) -> None:
        if self._items and (self._bytes + size > self.limits.max_bytes or key in self._keys):
            self.flush_now()
        self._items.append(item)
        self._bytes += size
        if key is not None:
            self._keys.add(key)
        if len(self._items) >= self.limits.max_items:
            self.flush_now()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            if self.limits.linger_s > 0:
                self._timer = loop.call_later(self.limits.linger_s, self.flush_now)
            else:  # the next turn of the loop: what was started in this one goes together
                self._timer = loop.call_soon(self.flush_now)

    def flush_now(self) -> None:
        """Hand over what is gathered (nothing when empty)."""
        items = self.take()
        if items:
            self._flush(items)

    def take(self) -> list[T]:
        """Everything gathered, without flushing it; the gatherer is empty after."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, self._items = self._items, []
        self._keys.clear()
        self._bytes = 0
        return items


def framed_size(size: int) -> int:
    """Bytes a message of ``size`` takes inside a repeated field (one tag byte, varint length)."""
    length, rest = 1, size
    while rest >= 0x80:
        rest >>= 7
        length += 1
    return 1 + length + size


class Expiry:
    """A sender's deadline: when it passes, the future it waits on gets the timeout outcome."""

    __slots__ = ("deadline_s", "expired", "waiter")

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.expired = False
        self.waiter: asyncio.Future[Outcome] | None = None

    def expire(self) -> None:
        self.expired = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(outcome_from_timeout(self.deadline_s))
