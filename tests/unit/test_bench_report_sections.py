"""The report's HOL, Spark floor and latency-curve sections, and the curve's chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.plot import curve_series, plot_curve
from bench.report import build_report, curve_table, hol_rows, markdown, write


def run(p50: float, p99: float, twice: int = 0, retry: int | None = 0) -> dict[str, Any]:
    return {
        "fast_p50_ms": p50,
        "fast_p99_ms": p99,
        "delivered": 100,
        "expected": 100,
        "delivered_more_than_once": twice,
        "redeliveries": twice,
        "redeliveries_retry_attempts": retry,
        "redeliveries_same_attempt": 0 if retry is not None else None,
    }


HOL = {
    "name": "hol",
    "messages": 100,
    "variants": {
        "grpc_tuned": {
            "system": "siding_grpc_tuned",
            "transport": "grpc",
            "route": "tuned",
            "with_slow": run(1080.0, 2342.4, twice=28, retry=28),
            "without_slow": run(703.0, 1210.0),
        },
        "http_defaults": {"system": "siding_http_defaults", "route": "defaults", "error": "boom"},
    },
}
FLOOR = {
    "name": "spark_floor",
    "messages": 100,
    "floor_path": "foreach",
    "p50_ms": 642.0,
    "p99_ms": 1176.0,
    "paths": [
        {
            "path": "foreach",
            "p50_ms": 642.0,
            "p99_ms": 1176.0,
            "trigger_median_ms": 488.0,
            "duration_ms_median": {"addBatch": 314.0, "walCommit": 70.0},
            "batches": 30,
        },
        {"path": "mapInArrow", "error": "RuntimeError: no"},
    ],
}
PEERS = {
    "name": "hol_peers",
    "messages": 100,
    "peers": {
        "benthos": {
            "system": "benthos",
            "with_slow": run(2.1, 7.6, twice=1, retry=None),
            "without_slow": run(2.0, 6.3, retry=None),
        },
        "parallel_consumer_vertx": {
            "system": "parallel_consumer_vertx",
            "with_slow": None,
            "without_slow": None,
            "error": "PeerUnavailable: mvn package failed",
        },
    },
}
CURVE = {
    "name": "latency_curve",
    "messages": None,
    "rates_msgs_per_s": [100.0, 3000.0],
    "seconds_per_point": 20.0,
    "curves": {
        "siding_grpc_defaults": {
            "points": [
                {"rate_msgs_per_s": 3000.0, "p50_ms": 900.0, "p99_ms": 2000.0, "complete": False,
                 "delivered": 50000, "messages": 60000},
                {"rate_msgs_per_s": 100.0, "p50_ms": 700.0, "p99_ms": 1100.0, "complete": True},
            ]
        },
        "benthos": {"points": None, "error": "PeerUnavailable: go build failed"},
        "parallel_consumer_vertx": {
            "points": [{"rate_msgs_per_s": 100.0, "error": "WaitTimeout: late"}]
        },
    },
}  # fmt: skip


def test_hol_rows_put_siding_the_floor_and_the_peers_side_by_side() -> None:
    rows = hol_rows(build_report("m", [HOL, FLOOR, PEERS], 1.0, 0.0))
    assert rows[0] == [
        "siding, gRPC stream", "tuned", "1,080", "2,342", "703 / 1,210", "28", "0", "28 / 0",
    ]  # fmt: skip
    assert rows[1][2] == "not run: boom"
    assert rows[2][0].startswith("Spark floor (foreach")
    assert rows[2][4] == "642 / 1,176"
    # a peer does not tell its attempt: its redeliveries are counted, not split
    assert rows[3][5:] == ["1", "0", "not known"]
    assert rows[4][2] == "not run: PeerUnavailable: mvn package failed"


def test_an_incomplete_run_says_how_much_was_delivered() -> None:
    variant = {
        "transport": "grpc",
        "route": "tuned",
        "with_slow": {**run(1.0, 2.0), "delivered": 90},
        "without_slow": run(1.0, 2.0),
    }
    partial = {"name": "hol", "messages": 100, "variants": {"grpc_tuned": variant}}
    rows = hol_rows(build_report("m", [partial], 1.0, 0.0))
    assert rows[0][5] == "0 (delivered 90 of 100)"


def test_curve_table_has_a_cell_per_rate_and_says_what_is_missing() -> None:
    header, rows = curve_table(CURVE)
    assert header == ["pushed by", "100 msg/s", "3,000 msg/s"]
    assert rows[0] == [
        "siding, gRPC stream, defaults",
        "700 / 1,100",
        "900 / 2,000 (50000 of 60000 delivered)",
    ]
    assert rows[1][1] == "not run: PeerUnavailable: go build failed"
    assert rows[2][1:] == ["error: WaitTimeout: late", "n/a"]


def test_the_markdown_has_every_section() -> None:
    text = markdown(build_report("m", [HOL, FLOOR, PEERS, CURVE], 1.0, 0.0))
    assert "### Head-of-line blocking" in text
    assert "### Spark floor" in text
    assert "| mapInArrow | error: RuntimeError: no |" in text
    assert "### Latency against load" in text
    assert "![latency against load](latency_curve.png)" in text


def test_curve_series_keeps_points_with_numbers_in_rate_order() -> None:
    assert curve_series(CURVE) == {
        "siding_grpc_defaults": [(100.0, 700.0, 1100.0), (3000.0, 900.0, 2000.0)]
    }


def test_write_draws_the_curve(tmp_path: Path) -> None:
    paths = write(build_report("m", [CURVE], 1.0, 0.0), tmp_path)
    png = tmp_path / "latency_curve.png"
    assert png in paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_curve({"curves": {}}, tmp_path / "empty.png").exists()


def test_the_pc_table_shows_parallel_consumer_over_http_only_where_it_ran() -> None:
    ran = {
        "name": "pc_table_unordered",
        "messages": 10,
        "siding_seconds": 1.0,
        "baselines": {"parallel_consumer_seconds": 0.5, "parallel_consumer_vertx_seconds": 2.5},
    }
    failed = {
        "name": "pc_table_key10000",
        "messages": 10,
        "siding_seconds": 1.0,
        "baselines": {
            "parallel_consumer_vertx_seconds": None,
            "parallel_consumer_vertx_error": "PeerUnavailable: no java",
        },
    }
    not_run = {"name": "pc_table_key10", "messages": 10, "siding_seconds": 1.0, "baselines": {}}
    text = markdown(build_report("m", [ran, failed, not_run], 1.0, 0.0))
    over_http = [line for line in text.splitlines() if "over HTTP" in line]
    assert over_http == [
        "| pc_table_unordered | 10 | seconds, Parallel Consumer over HTTP |  | 2.500 |  |",
        "| pc_table_key10000 | 10 | seconds, Parallel Consumer over HTTP |  | n/a |  |",
    ]
    assert "Parallel Consumer over the network not run: PeerUnavailable: no java" in text


def test_the_memory_section_has_a_column_per_system_siding_first() -> None:
    entries = [
        {"name": "hol", "messages": 3000, "peak_rss_mb": {"siding": 1700}},
        {"name": "hol_peers", "messages": 3000,
         "peak_rss_mb": {"siding": 1650, "Redpanda Connect": 60, "share group": 210}},
        {"name": "cost", "messages": 1, "error": "x"},  # no peak: no row
    ]  # fmt: skip
    text = markdown(build_report("m", entries, 1.0, 0.0))
    assert "### Memory" in text
    assert "| workload | siding | Redpanda Connect | share group |" in text
    assert "| hol | 1700 | n/a | n/a |" in text
    assert "| hol_peers | 1650 | 60 | 210 |" in text
