"""``siding dlq stats --out``: the counts per (reason, hour, key) as one CSV or Parquet file,
written on the driver (the table is small). CSV needs nothing; Parquet needs pyarrow, which
only the ``parquet`` extra installs (``pip install 'siding[parquet]'``)."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from siding.errors import DlqError

COLUMNS = ("reason", "hour", "key", "count")
SUFFIXES = (".parquet", ".csv")


@dataclass(frozen=True, slots=True)
class CountRow:
    reason: str
    hour_ms: int
    key: str | None
    count: int


def hour_text(hour_ms: int) -> str:
    """Pure: an hour as ISO 8601 UTC, ``2026-11-23T17:00:00Z``."""
    return datetime.fromtimestamp(hour_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_target(out: Path) -> None:
    if out.suffix not in SUFFIXES:
        raise DlqError(f"--out {out}: give a .parquet or .csv file")
    if out.suffix == ".parquet":
        _pyarrow(out)


def _pyarrow(out: Path) -> Any:
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise DlqError(
            f"--out {out}: writing Parquet needs pyarrow: pip install 'siding[parquet]'"
            " (or write a .csv file)"
        ) from exc
    return pa, pq


def write_counts(rows: Sequence[CountRow], out: Path) -> None:
    """Write ``rows`` to ``out`` (.csv or .parquet) through a temporary file, so a reader never
    sees half a file."""
    check_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    if out.suffix == ".parquet":
        _write_parquet(rows, temporary, out)
    else:
        with temporary.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(COLUMNS)
            writer.writerows((r.reason, hour_text(r.hour_ms), r.key, r.count) for r in rows)
    os.replace(temporary, out)


def _write_parquet(rows: Sequence[CountRow], temporary: Path, out: Path) -> None:
    pa, pq = _pyarrow(out)
    schema = pa.schema(
        [
            ("reason", pa.string()),
            # Milliseconds: Spark and most readers cannot read INT64 nanoseconds.
            ("hour", pa.timestamp("ms", tz="UTC")),
            ("key", pa.string()),
            ("count", pa.int64()),
        ]
    )
    columns = {
        "reason": [r.reason for r in rows],
        "hour": [r.hour_ms for r in rows],
        "key": [r.key for r in rows],
        "count": [r.count for r in rows],
    }
    pq.write_table(pa.table(columns, schema=schema), temporary)
