"""The driver's log: a summary per batch and every breaker transition, as text or JSON."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest
from click.testing import CliRunner

from siding.cli import logs
from siding.cli.run import run
from siding.dispatch import BreakerState, BreakerTransition, DispatchStats
from siding.pipeline.driver.batchlog import (
    breaker_changes,
    clock_time,
    log_batch,
    summarise,
    task_line,
)
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts

CLOSED, OPEN, HALF = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
TRIP = BreakerTransition(10.0, CLOSED, OPEN, wall=1_800_000_000.25, open_for_s=1.0, death=True)
PROBE = BreakerTransition(15.0, OPEN, HALF, wall=1_800_000_005.5)
AT_TRIP, AT_PROBE = clock_time(TRIP.wall), clock_time(PROBE.wall)
TRIPPED = f"at {AT_TRIP}, for 1s after a death"


def _task(pid: int, *transitions: BreakerTransition, **counts: int) -> TaskResult:
    stats = DispatchStats(breaker_transitions=transitions)
    return TaskResult(StepCounts(**counts), stats=stats, pid=pid, host="h")


RESULTS = [
    _task(1, TRIP, records=60, acked=50, to_lane=6, to_dlq=4),
    # Another task of the same process saw the same transitions of its shared breaker.
    _task(1, TRIP, PROBE, records=40, acked=38, parked=1, held=1),
    _task(2, TRIP, records=0),
]


def test_a_batch_is_summed_over_its_tasks() -> None:
    summary = summarise("billing", 1, RESULTS, 1.23456)
    assert (
        summary.counts.records,
        summary.counts.acked,
        summary.counts.to_lane,
        summary.counts.to_dlq,
    ) == (100, 88, 6, 4)
    assert (summary.counts.parked, summary.counts.held, summary.lane) == (1, 1, "retry-1")
    assert summary.message() == (
        "route billing retry-1: 100 records in 1.235s"
        " (acked 88, to lanes 6, dead 4, parked 1, held 1)"
    )


def test_each_breaker_transition_is_reported_once_per_process() -> None:
    changes = breaker_changes(RESULTS)
    assert [(c.pid, c.transition) for c in changes] == [(1, TRIP), (1, PROBE), (2, TRIP)]
    assert changes[0].message("billing") == (
        f"route billing: circuit breaker closed -> open"
        f" (executor h pid 1, at {AT_TRIP}, for 1s after a death)"
    )


def test_a_transition_says_when_it_happened_to_the_millisecond() -> None:
    # logged when its batch ends, which may be many seconds after the transition
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.250", AT_TRIP)
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.500", AT_PROBE)
    assert AT_TRIP[6:8] == f"{(int(TRIP.wall) % 60):02d}"


def test_a_task_line_names_its_worker_and_what_it_waited_on() -> None:
    stats = DispatchStats(
        sends=12,
        max_in_flight=5,
        final_limit=8,
        breaker_wait_s=3.25,
        suspected=2,
        isolations=3,
        handed_over=1,
    )
    result = TaskResult(StepCounts(records=10, acked=8, parked=2), stats=stats, pid=7, host="h")
    assert task_line("billing", "main", result) == (
        "route billing main task (executor h pid 7): 10 records (acked 8, to lanes 0, dead 0,"
        " parked 2); 12 sends, max 5 in flight (limit 8 at the end), breaker wait 3.2s, suspects 2"
        " (isolations 3, convicted 0, handed over 1)"
    )
    bare = TaskResult(StepCounts(records=1, acked=1), pid=7, host="h")
    assert task_line("billing", "parked", bare).endswith("dead 0, parked 0)")


def test_the_batch_and_its_transitions_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="siding.batches"):
        log_batch("billing", 0, RESULTS, 0.5)
    levels = [(r.levelno, r.getMessage().split(":", 1)[1].strip()) for r in caplog.records]
    assert levels == [
        (logging.INFO, "100 records in 0.500s (acked 88, to lanes 6, dead 4, parked 1, held 1)"),
        (logging.WARNING, f"circuit breaker closed -> open (executor h pid 1, {TRIPPED})"),
        (logging.INFO, f"circuit breaker open -> half_open (executor h pid 1, at {AT_PROBE})"),
        (logging.WARNING, f"circuit breaker closed -> open (executor h pid 2, {TRIPPED})"),
    ]


def test_each_task_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="siding.batches"):
        log_batch("billing", 0, RESULTS, 0.5)
    tasks = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    # the task with no records says nothing
    assert [m.split(":")[0] for m in tasks] == [
        "route billing main task (executor h pid 1)",
        "route billing main task (executor h pid 1)",
    ]


def test_json_logs_are_one_object_per_line_with_the_batch_fields() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        logs.configure("info", "json", out)
        log_batch("billing", 0, RESULTS[:1], 0.25)
        logging.getLogger("siding.batches").debug("not at info")
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    batch, trip = (json.loads(line) for line in lines)
    assert batch["level"] == "info" and batch["logger"] == "siding.batches"
    assert batch["event"] == "batch" and batch["route"] == "billing" and batch["lane"] == "main"
    assert (batch["records"], batch["acked"], batch["dead"], batch["seconds"]) == (60, 50, 4, 0.25)
    assert batch["message"].startswith("route billing main: 60 records")
    assert batch["time"].endswith("+00:00")
    assert (trip["event"], trip["before"], trip["after"], trip["level"]) == (
        "breaker",
        "closed",
        "open",
        "warning",
    )


def test_an_exception_is_one_json_string() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, "f", 1, "failed %s", ("now",), sys.exc_info()
        )
    entry = json.loads(logs.json_line(record))
    assert entry["message"] == "failed now" and "ValueError: boom" in entry["exception"]


def test_run_takes_a_log_level_and_a_log_format() -> None:
    help_text = CliRunner().invoke(run, ["--help"]).output
    assert "--log-level [debug|info|warning|error]" in help_text
    assert "--log-format [text|json]" in help_text
    refused = CliRunner().invoke(run, ["--log-format", "xml"])
    assert refused.exit_code == 2
