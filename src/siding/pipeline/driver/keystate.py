"""Key mode across batches: which records of each key wait out of the line, in retry lanes or
held (driver side).

Every batch of every lane of a route reads a snapshot, and reports wait/release events when it
ends. The state is kept durable in a compacted topic (``naming.state_topic(route, naming.KEYS)``),
written before the batch may commit, and read back when the route starts.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterable, Mapping

from siding.dispatch.keyorder import OrderKey, WaitEvent, WaitingRecord
from siding.routing.producer import OutRecord


def encode_key(key: OrderKey) -> bytes:
    partition, raw = key
    return struct.pack(">i", partition) + raw


def decode_key(data: bytes) -> OrderKey:
    (partition,) = struct.unpack(">i", data[:4])
    return (int(partition), data[4:])


def encode_value(records: Mapping[int, WaitingRecord]) -> bytes | None:
    """``None`` (a tombstone) once nothing of the key waits."""
    if not records:
        return None
    rows = [
        [r.offset, r.lane, r.not_before_ms]
        for r in sorted(records.values(), key=lambda r: r.offset)
    ]
    return json.dumps(rows, separators=(",", ":")).encode()


def decode_value(data: bytes | None) -> dict[int, WaitingRecord]:
    if not data:
        return {}
    return {int(o): WaitingRecord(int(o), int(lane), int(nb)) for o, lane, nb in json.loads(data)}


MAX_EARLY_RELEASES = 100_000


class KeyWaits:
    """Key mode's waiting records of a route, by key. Thread-safe: the main lane's and the retry
    lanes' batches run on different driver threads."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._lock = threading.Lock()
        self._waiting: dict[OrderKey, dict[int, WaitingRecord]] = {}
        # A retry lane can finish a record before the main-lane batch that sent it there has
        # ended (its events arrive at batch end): remember such early releases so the late wait
        # event does not make a record that is already done wait.
        self._released_early: dict[tuple[OrderKey, int], None] = {}
        # Serialises apply + write, so the compacted topic ends on the latest state.
        self.write_lock = threading.Lock()

    def snapshot(self) -> dict[OrderKey, tuple[WaitingRecord, ...]]:
        with self._lock:
            return {
                key: tuple(sorted(records.values(), key=lambda r: r.offset))
                for key, records in self._waiting.items()
            }

    def apply(self, events: Iterable[WaitEvent]) -> list[OutRecord]:
        """Apply a batch's events; returns the state records to write for the keys that changed."""
        changed: set[OrderKey] = set()
        with self._lock:
            for event in events:
                early = (event.key, event.offset)
                if event.lane is None:
                    if self._waiting.get(event.key, {}).pop(event.offset, None) is None:
                        self._remember_early(early)
                        continue
                elif early in self._released_early:
                    del self._released_early[early]
                    continue
                else:
                    records = self._waiting.setdefault(event.key, {})
                    record = WaitingRecord(event.offset, event.lane, event.not_before_ms)
                    if records.get(event.offset) == record:
                        continue  # held again, unchanged: nothing to write
                    records[event.offset] = record
                changed.add(event.key)
            out = []
            for key in changed:
                records = self._waiting.get(key, {})
                out.append(OutRecord(self.topic, encode_key(key), encode_value(records), ()))
                if not records:
                    self._waiting.pop(key, None)
            return out

    def _remember_early(self, early: tuple[OrderKey, int]) -> None:
        self._released_early[early] = None
        while len(self._released_early) > MAX_EARLY_RELEASES:
            del self._released_early[next(iter(self._released_early))]

    def restore(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Rebuild from the compacted topic, read from the beginning (later records win)."""
        with self._lock:
            for key, value in records:
                waiting = decode_value(value)
                if waiting:
                    self._waiting[decode_key(key)] = waiting
                else:
                    self._waiting.pop(decode_key(key), None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(r) for r in self._waiting.values())
