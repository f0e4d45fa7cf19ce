"""The driver's view of a route's progress records (docs/replay.md), read when the route starts
and again before a batch runs a second time: what earlier attempts of a batch made durable."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from siding.pipeline.executor.progress import Known, Mark, decode, known_for

Reader = Callable[[], Sequence[tuple[bytes, bytes | None]]]


class ProgressStore:
    """The latest progress record of each task key (a compacted topic keeps no more)."""

    def __init__(self, topic: str, read_new: Reader) -> None:
        self.topic = topic
        self._read_new = read_new
        self._lock = threading.Lock()
        self._marks: dict[bytes, Mark] = {}

    def catch_up(self) -> None:
        """Read every progress record written since the last call."""
        with self._lock:
            for key, value in self._read_new():
                mark = decode(key, value)
                if mark is None:
                    self._marks.pop(key, None)
                else:
                    self._marks[key] = mark

    def known(self, query: str, query_id: str, batch: int) -> Known:
        with self._lock:
            return known_for(self._marks.values(), query, query_id, batch)
