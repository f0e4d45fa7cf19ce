"""``siding top`` draws the lane table from a ``/status`` document."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from siding.cli.top import top_view


def _render(status: dict[str, Any]) -> str:
    console = Console(record=True, width=240, color_system=None)
    console.print(top_view(status))
    return console.export_text()


def test_each_lane_shows_its_counts_outputs_and_calls_open_now() -> None:
    lane = {
        "lane": 0,
        "label": "main",
        "rate_per_s": 12.5,
        "records": 1200,
        "acked": 1150,
        "to_lane": 40,
        "to_dlq": 10,
        "parked": 3,
        "outputs": 2300,
        "in_flight_last_batch": 17,
        "latency_s": {"p50": 0.012, "p99": 0.4},
        "breaker": "closed",
    }
    status = {
        "healthy": True,
        "uptime_s": 61,
        "routes": [
            {
                "name": "billing",
                "lanes": [lane],
                "kafka": {"in_flight": {"total": 7, "by_lane": {"main": 7}, "at_ms": 1}},
            }
        ],
    }
    text = _render(status)
    header = next(line for line in text.splitlines() if "route" in line)
    row = next(line for line in text.splitlines() if line.startswith("billing"))
    columns = header.split()
    assert "outputs" in columns
    cells = row.split()
    # route, lane, rate, records, ack, → lane, → DLQ, parked, outputs, in flight now, peak
    assert cells[:11] == ["billing", "main", "12.5", "1,200", "1,150", "40", "10", "3", "2,300",
                          "7", "17"]  # fmt: skip
