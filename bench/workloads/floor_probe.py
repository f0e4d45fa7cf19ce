"""The Spark floor's executor step: note each record's arrival, nothing else.

These functions run in Spark's Python workers. ``spark_floor`` registers this module to be
pickled by value, so the workers need not import ``bench`` (they do import ``siding``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

from siding.devkit.sim_consumer import record_line
from siding.model import delivery_id


def _line(topic: str, partition: int, offset: int, headers: Any, now: float) -> str:
    text = {k: (v or b"").decode("utf-8", "replace") for k, v in (headers or [])}
    return record_line(delivery_id(topic, partition, offset), 1, now, text)


def note_rows(path: str, rows: Iterable[Any]) -> None:
    """Append one record line per row (Spark ``Row`` with topic, partition, offset, headers)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for row in rows:
            now = time.time()
            os.write(fd, _line(row.topic, row.partition, row.offset, row.headers, now).encode())
    finally:
        os.close(fd)


def note_arrow(path: str, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow``: one record line per row of each Arrow batch; yields nothing."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for batch in batches:
            now = time.time()
            lines = [
                _line(r["topic"], r["partition"], r["offset"], _pairs(r["headers"]), now)
                for r in batch.to_pylist()
            ]
            if lines:
                os.write(fd, "".join(lines).encode())
    finally:
        os.close(fd)
    yield from ()


def _pairs(headers: list[dict[str, Any]] | None) -> list[tuple[str, bytes]]:
    return [(h["key"], h["value"]) for h in headers or []]
