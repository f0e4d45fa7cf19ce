"""The benchmark report's shape: the JSON the issue specifies and the markdown table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report import build_report, cell, field, machine, markdown, write
from bench.workloads.context import scale_from_env, scaled

ENTRIES: list[dict[str, Any]] = [
    {
        "name": "partition_scalability",
        "messages": 20000,
        "siding_msgs_per_s": 912.5,
        "bound_msgs_per_s": 1000.0,
        "baselines": {"serial_consumer_msgs_per_s": 0.998},
    },
    {
        "name": "pc_table_key10",
        "messages": 10000,
        "siding_seconds": 4.2,
        "baselines": {
            "parallel_consumer_seconds": None,
            "parallel_consumer_error": "not resolvable",
            "serial_consumer_seconds": 61.0,
        },
    },
    {"name": "hol", "messages": None, "error": "RuntimeError: broker went away"},
]


def test_report_has_machine_and_named_workloads(tmp_path: Path) -> None:
    report = build_report("2 cores", ENTRIES, 1.0, 1_800_000_000.0)
    paths = write(report, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["bench-20270115T080000Z.json", "latest.json", "latest.md"]
    data = json.loads((tmp_path / "latest.json").read_text())
    assert set(data) >= {"machine", "workloads"}
    assert data["machine"] == "2 cores"
    assert [w["name"] for w in data["workloads"]] == [
        "partition_scalability",
        "pc_table_key10",
        "hol",
    ]
    assert all("messages" in w for w in data["workloads"])
    assert (tmp_path / "bench-20270115T080000Z.json").read_text() == (
        tmp_path / "latest.json"
    ).read_text()
    assert not list(tmp_path.glob("*.tmp"))


def test_markdown_rows_show_siding_peer_and_serial_columns() -> None:
    text = markdown(build_report("2 cores", ENTRIES, 0.1, 0.0))
    assert "Machine: 2 cores" in text and "scale 0.1" in text
    assert "| partition_scalability | 20000 | msgs/s | 912.5 |  | 0.998 |" in text
    assert "| pc_table_key10 | 10000 | seconds | 4.200 | n/a | 61.0 |" in text
    assert "| hol |  | error: RuntimeError: broker went away |" in text
    assert "- pc_table_key10: Parallel Consumer not run: not resolvable" in text


def test_cells() -> None:
    assert cell(None) == "n/a"
    assert cell(1234.56) == "1,234.6"
    assert cell(True) == "True"


def test_machine_names_cores_python_and_java() -> None:
    text = machine()
    assert "cores" in text and "Python 3." in text and "RAM" in text


def test_scale_comes_from_the_environment_and_floors_counts() -> None:
    assert scale_from_env({}) == 1.0
    assert scale_from_env({"SIDING_BENCH_SCALE": "0.1"}) == 0.1
    assert scaled(10_000, 0.1) == 1000
    assert scaled(10_000, 0.0001, floor=500) == 500


def test_a_p50_p99_pair_is_one_cell() -> None:
    entry = {"with_pill": {"during_isolation_p50_ms": 12.0, "during_isolation_p99_ms": 2900.0}}
    assert field(entry, "with_pill.during_isolation_p50_ms+p99") == "12.0 / 2,900.0"


def test_a_partial_run_names_its_command() -> None:
    built = build_report("m", [], 1.0, 0.0, "python -m bench.run --only crash_pill")
    assert "`python -m bench.run --only crash_pill`" in markdown(built)
    assert "`make bench`" in markdown(build_report("m", [], 1.0, 0.0))
