"""The demo's pure parts: the serial-consumer estimate and the progress line."""

from __future__ import annotations

import pytest

from siding.devkit.demo_view import ViewState, backlog, plain_line, serial_estimate
from siding.pipeline.driver.metrics import LaneMetrics, Snapshot
from siding.steps import StepCounts


def test_serial_consumer_waits_out_every_slow_message() -> None:
    # Given 10 messages produced at once: 9 take 0.1 s, one takes 2 s
    delays = [0.1] * 4 + [2.0] + [0.1] * 5
    # When a serial consumer has 2.45 s
    got = serial_estimate(delays, [0.0] * 10, horizon_s=2.45)
    # Then the slow one holds up everything behind it
    assert got.done_in_run == 5
    assert got.behind == 5
    assert got.busy_s == pytest.approx(2.9)
    assert got.msgs_per_s == pytest.approx(10 / 2.9)
    assert got.catch_up_s == pytest.approx(0.5)


def test_serial_consumer_cannot_start_before_a_message_is_produced() -> None:
    # One message per second, each 0.1 s: the consumer idles and keeps up.
    got = serial_estimate([0.1] * 5, [0.0, 1.0, 2.0, 3.0, 4.0], horizon_s=4.5)
    assert (got.done_in_run, got.behind) == (5, 0)


def test_no_traffic_is_no_throughput() -> None:
    assert serial_estimate([], [], 10.0).msgs_per_s == 0.0


def test_plain_line_and_backlog_from_a_snapshot() -> None:
    lanes = {
        ("billing", 0): LaneMetrics(
            counts=StepCounts(records=900, acked=880, to_lane=15, to_dlq=5)
        ),
        ("billing", 1): LaneMetrics(counts=StepCounts(records=10, acked=10)),
    }
    state = ViewState(Snapshot(lanes, 12.0, 0.0), "billing", 2, 12.0, 60.0, 1000)
    assert backlog(state) == 100
    line = plain_line(state)
    assert "produced=1000 delivered=890 dlq=5" in line
    assert "main=900/15/5 retry-1=10/0/0" in line
