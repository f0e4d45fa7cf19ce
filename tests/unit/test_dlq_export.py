"""``dlq stats --out``: one CSV file with nothing but the standard library, Parquet with pyarrow
(the ``parquet`` extra), and a clear error without it."""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from siding.dlq.export import CountRow, check_target, hour_text, write_counts
from siding.errors import DlqError

HOUR_MS = 1_763_917_200_000  # 2025-11-23T17:00:00Z
ROWS = [
    CountRow("retries exhausted", HOUR_MS, "alice", 2),
    CountRow("dead: not utf-8", HOUR_MS + 3_600_000, None, 1),
]


def test_an_hour_is_iso_utc() -> None:
    assert hour_text(HOUR_MS) == "2025-11-23T17:00:00Z"


def test_csv_has_a_header_and_one_line_per_count(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "stats.csv"
    write_counts(ROWS, out)
    with out.open() as lines:
        got = list(csv.DictReader(lines))
    assert got == [
        {
            "reason": "retries exhausted",
            "hour": "2025-11-23T17:00:00Z",
            "key": "alice",
            "count": "2",
        },
        {"reason": "dead: not utf-8", "hour": "2025-11-23T18:00:00Z", "key": "", "count": "1"},
    ]
    assert [p.name for p in out.parent.iterdir()] == ["stats.csv"]  # no temporary left


def test_parquet_keeps_types_and_millisecond_utc_hours(tmp_path: Path) -> None:
    out = tmp_path / "stats.parquet"
    write_counts(ROWS, out)
    table = pq.read_table(out)
    assert str(table.schema.field("hour").type) == "timestamp[ms, tz=UTC]"
    assert table.column("count").to_pylist() == [2, 1]
    assert table.column("key").to_pylist() == ["alice", None]
    assert table.column("hour").to_pylist()[0] == datetime(2025, 11, 23, 17, tzinfo=UTC)


def test_parquet_without_pyarrow_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(DlqError, match=r"pip install 'siding\[parquet\]'"):
        check_target(tmp_path / "stats.parquet")
    check_target(tmp_path / "stats.csv")  # CSV needs nothing


def test_other_suffixes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DlqError, match=r"give a \.parquet or \.csv file"):
        check_target(tmp_path / "stats.json")
