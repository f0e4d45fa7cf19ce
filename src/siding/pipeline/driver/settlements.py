"""The driver's view of a route's settled parked calls, kept from the ``settled`` state topic.

The park lane asks for the settlements of the records in its batch, and tells when it used
them up; used and stale settlements get a tombstone so the compacted topic stays small.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from siding.model import OutcomeKind
from siding.routing import settlement
from siding.routing.producer import OutRecord
from siding.routing.settlement import Settlement

# The key of the record that says the route stopped on the DLQ-flood guard (its value: when, in
# ms). Parked calls may still answer DEAD after the stop began, until the process is gone; so the
# next start forgets every DEAD answer it finds while the mark is there, then removes the mark
# (docs/dispatch.md, "DLQ-flood guard"). Settlement keys are tokens, never this.
FLOOD_MARK = "siding.flood-stop"
# A settlement nobody used for this long belongs to a parked record that was never written
# (its batch failed and ran again): forget it.
STALE_AFTER_MS = 6 * 3600 * 1000

Reader = Callable[[], Sequence[tuple[bytes, bytes | None]]]
Writer = Callable[[Sequence[OutRecord]], None]


class SettlementStore:
    def __init__(self, topic: str, read_new: Reader, write: Writer) -> None:
        self.topic = topic
        self._read_new = read_new
        self._write = write
        self._lock = threading.Lock()
        # The park lane and a drain both read (from two threads); the reader is one consumer.
        self._reading = threading.Lock()
        self._known: dict[str, Settlement] = {}
        self._flood_marked = False

    def catch_up(self) -> None:
        """Read every settlement written since the last call."""
        with self._reading:
            records = self._read_new()
            with self._lock:
                for key, value in records:
                    token = key.decode()
                    if token == FLOOD_MARK:
                        self._flood_marked = value is not None
                    elif value is None:
                        self._known.pop(token, None)
                    else:
                        self._known[token] = settlement.decode(key, value)

    def forget_dead(self) -> int:
        """Forget every DEAD answer known now (after catching up), durably; how many."""
        self.catch_up()
        with self._lock:
            dead = [t for t, s in self._known.items() if s.outcome.kind is OutcomeKind.DEAD]
        return self.forget(dead)

    def mark_flood(self, now_ms: int | None = None) -> int:
        """The route stops on the DLQ-flood guard: mark it (durably), and forget the DEAD answers
        known now; how many were forgotten."""
        at_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self._write([OutRecord(self.topic, FLOOD_MARK.encode(), str(at_ms).encode(), ())])
        return self.forget_dead()

    def after_flood(self) -> int:
        """At the route's start (after ``catch_up``): if the last run stopped on the flood guard,
        forget every DEAD answer it left, then the mark; how many were forgotten."""
        if not self._flood_marked:
            return 0
        forgotten = self.forget_dead()
        self._write([OutRecord(self.topic, FLOOD_MARK.encode(), None, ())])
        self._flood_marked = False
        return forgotten

    def of(self, tokens: Iterable[str]) -> dict[str, Settlement]:
        with self._lock:
            return {t: self._known[t] for t in tokens if t in self._known}

    def forget(self, tokens: Iterable[str], now_ms: int | None = None) -> int:
        """Drop used settlements and stale ones, durably (tombstones); returns how many."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            gone = set(tokens) & self._known.keys()
            gone |= {t for t, s in self._known.items() if now_ms - s.answered_ms > STALE_AFTER_MS}
        if gone:
            self._write([settlement.tombstone(self.topic, t) for t in sorted(gone)])
            with self._lock:
                for token in gone:
                    self._known.pop(token, None)
        return len(gone)

    def __len__(self) -> int:
        with self._lock:
            return len(self._known)

    def snapshot(self) -> Mapping[str, Settlement]:
        with self._lock:
            return dict(self._known)
