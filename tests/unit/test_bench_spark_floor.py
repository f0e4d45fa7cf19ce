"""The Spark floor's pure parts: the trigger profile, the fastest path, the executor probe."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from bench.workloads.floor_probe import note_arrow, note_rows
from bench.workloads.spark_floor import fastest, trigger_profile
from siding.devkit.sim_consumer import read_records


def progress(batch: int, rows: int, trigger: float, add: float) -> dict[str, Any]:
    return {
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": trigger, "addBatch": add, "walCommit": 50},
    }


def test_the_profile_is_the_median_of_triggers_that_read_rows_after_the_first() -> None:
    progresses = [
        progress(0, 1, 5000.0, 4000.0),  # the warm-up: query start, left out
        progress(1, 0, 10.0, 0.0),  # idle: left out
        progress(3, 120, 700.0, 500.0),
        progress(2, 80, 500.0, 300.0),
        progress(4, 100, 600.0, 400.0),
    ]
    got = trigger_profile(progresses)
    assert got["batches"] == 3
    assert got["trigger_median_ms"] == 600.0
    assert got["duration_ms_median"] == {
        "triggerExecution": 600.0,
        "addBatch": 400.0,
        "walCommit": 50.0,
    }
    assert got["median_rows_per_batch"] == 100


def test_no_batch_with_rows_has_no_profile() -> None:
    got = trigger_profile([progress(0, 1, 900.0, 800.0)])
    assert got["batches"] == 0
    assert got["trigger_median_ms"] is None
    assert got["duration_ms_median"] == {}


def test_the_floor_is_the_completed_path_with_the_lowest_p50() -> None:
    paths: list[dict[str, Any]] = [
        {"path": "a", "p50_ms": 500.0, "complete": True},
        {"path": "b", "p50_ms": 300.0, "complete": False},
        {"path": "c", "p50_ms": 400.0, "complete": True},
        {"path": "d", "error": "boom"},
    ]
    best = fastest(paths)
    assert best is not None
    assert best["path"] == "c"
    assert fastest([{"path": "d", "error": "boom"}]) is None


Row = namedtuple("Row", "topic partition offset headers")


def test_the_probe_notes_each_row_with_its_produce_time(tmp_path: Path) -> None:
    path = tmp_path / "arrivals.csv"
    headers = [("sim-produced-at", bytearray(b"100.5")), ("sim-seq", bytearray(b"7"))]
    note_rows(str(path), [Row("t", 0, 7, headers), Row("t", 0, 8, None)])
    got = read_records(path)
    assert [(r.delivery_id, r.attempt, r.produced_s, r.seq) for r in got] == [
        ("t/0/7", 1, 100.5, 7),
        ("t/0/8", 1, None, None),
    ]
    assert all(r.received_s > 100.5 for r in got)


def test_the_arrow_probe_notes_rows_and_yields_nothing(tmp_path: Path) -> None:
    path = tmp_path / "arrivals.csv"
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    batch = pa.record_batch(
        {
            "topic": ["t", "t"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": [1, 2],
            "headers": pa.array(
                [[{"key": "sim-produced-at", "value": b"50.0"}], None], pa.list_(header)
            ),
        }
    )
    assert list(note_arrow(str(path), iter([batch]))) == []
    got = read_records(path)
    assert [(r.delivery_id, r.produced_s) for r in got] == [("t/0/1", 50.0), ("t/0/2", None)]
    assert got[0].received_s == pytest.approx(got[1].received_s)
