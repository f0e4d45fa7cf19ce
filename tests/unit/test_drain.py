"""The driver's drain state (issue 17): which batches may start, when a route is quiet, which
parked calls are still awaited, what the log says; ``drain_timeout`` in the config."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from siding.config import parse_config
from siding.errors import ConfigError
from siding.pipeline.driver.drain import (
    STOPPED_TEXT,
    Drain,
    DrainStopped,
    RouteTally,
    fields,
    hold,
    quiet_py4j,
    summary,
)
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts

QUERY = "siding.billing.main"


def never_interrupted(ms: int) -> None:
    time.sleep(ms / 1000 / 20)


def interrupted(_ms: int) -> None:
    raise RuntimeError("py4j: java.lang.InterruptedException: sleep interrupted")


def results(
    acked: int = 0, parked: tuple[tuple[str, int], ...] = (), unsent: int = 0
) -> list[TaskResult]:
    return [
        TaskResult(
            counts=StepCounts(
                records=acked + len(parked) + unsent, acked=acked, parked=len(parked) + unsent
            ),
            running_parked=parked,
        )
    ]


def later_ms(seconds: float) -> int:
    return int((time.time() + seconds) * 1000)


def test_batches_deliver_until_the_drain_then_are_held_until_their_query_stops() -> None:
    drain = Drain({"billing": 5.0})
    drain.enter(QUERY, never_interrupted)  # returns: it may deliver
    assert not drain.quiet([QUERY])
    drain.leave(QUERY, "billing", 0, results(acked=3))
    assert drain.quiet([QUERY]) is False  # finished, not yet committed
    drain.progressed(QUERY, 0)
    assert drain.quiet([QUERY])
    # When the drain begins, a batch that starts is held...
    assert drain.begin()
    assert not drain.begin()
    ended: list[BaseException] = []

    def start_batch() -> None:
        try:
            drain.enter(QUERY, never_interrupted)
        except DrainStopped as exc:
            ended.append(exc)

    thread = threading.Thread(target=start_batch)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive() and not ended
    # ...until its query is stopped; it then ends as a stop, and counts as quiet meanwhile
    assert drain.quiet([QUERY])
    drain.stop(QUERY)
    thread.join(5)
    assert len(ended) == 1 and str(ended[0]) == STOPPED_TEXT


def test_a_held_batch_ends_at_once_when_the_stop_interrupts_its_sleep() -> None:
    with pytest.raises(DrainStopped):
        hold(interrupted, lambda: False)


def test_the_stop_text_is_the_one_spark_takes_for_an_interruption() -> None:
    # StreamExecution.PROXY_ERROR: the py4j error text, then one of the interruption exceptions,
    # close behind (Spark's regular expression overflows the stack on a long gap).
    marker = "py4j.protocol.Py4JJavaError: An error occurred while calling"
    assert marker in STOPPED_TEXT
    rest = STOPPED_TEXT[STOPPED_TEXT.index(marker) + len(marker) :]
    assert "java.lang.InterruptedException" in rest and len(rest) < 100


def test_a_failed_batch_is_a_stop_only_while_its_query_is_stopping() -> None:
    drain = Drain({"billing": 5.0})
    drain.failed(QUERY, never_interrupted)  # returns: the caller raises its own error
    drain.stop(QUERY)
    with pytest.raises(DrainStopped):
        drain.failed(QUERY, never_interrupted)
    hard = Drain({"billing": 5.0})
    hard.hard.set()
    with pytest.raises(DrainStopped):
        hard.failed(QUERY, interrupted)


def test_parked_calls_are_awaited_until_answered_or_past_due() -> None:
    drain = Drain({"billing": 5.0})
    drain.enter(QUERY, never_interrupted)
    calls = (("a", later_ms(60)), ("b", later_ms(60)), ("c", later_ms(60)))
    drain.leave(QUERY, "billing", 0, results(acked=5, parked=calls))
    assert drain.waiting_calls("billing") == 3
    answers: dict[str, object] = {"a": object()}

    def known(tokens: Collection[str]) -> Mapping[str, object]:
        return {t: answers[t] for t in tokens if t in answers}

    # Answered before the drain: forgotten, not counted
    drain.settle("billing", known)
    assert drain.waiting_calls("billing") == 2
    drain.begin()
    answers["b"] = object()
    drain.settle("billing", known)
    tally = drain.finish("billing")
    assert tally.finished == 1 and tally.parked.keys() == {"c"}
    assert "1 call finished, 1 handed to a lane" in summary("billing", tally)


def test_a_batch_ending_during_the_drain_counts_its_answers_and_what_it_handed_over() -> None:
    drain = Drain({"billing": 5.0})
    drain.enter(QUERY, never_interrupted)
    drain.begin()
    past_due = (("old", later_ms(-1)),)
    drain.leave(QUERY, "billing", 7, results(acked=40, parked=(("x", later_ms(60)),), unsent=6))
    tally = drain.finish("billing")
    assert (tally.finished, tally.handed, len(tally.parked)) == (40, 6, 1)
    # A parked call past its due time without an answer will not answer: handed to its lane
    drain2 = Drain({"r": 5.0})
    drain2.enter("q", never_interrupted)
    drain2.leave("q", "r", 0, results(parked=past_due))
    drain2.begin()
    drain2.settle("r", lambda _tokens: {})
    assert drain2.waiting_calls("r") == 0 and drain2.finish("r").handed == 1


def test_the_summary_says_what_was_cut_by_a_second_signal() -> None:
    tally = RouteTally(finished=12, handed=3, seconds=1.25)
    assert summary("billing", tally) == (
        "drain: route billing: 12 calls finished, 3 handed to a lane, in 1.2s"
    )
    text = summary("billing", tally, replayed=1, hard=True)
    assert "(stopped at once)" in text and "1 batch(es) stopped mid-way" in text
    tally.parked["t"] = 1
    assert fields("billing", tally, replayed=1, hard=True) == {
        "event": "drain",
        "route": "billing",
        "finished": 12,
        "handed": 4,
        "seconds": 1.25,
        "replayed": 1,
        "hard": True,
    }


def test_each_route_gets_a_drain_file_that_appears_when_the_drain_begins() -> None:
    drain = Drain({"billing": 5.0, "orders": 9.0})
    assert drain.signal_file("billing") == ""
    drain.open_signal()
    files = [Path(drain.signal_file(r)) for r in ("billing", "orders")]
    assert not any(f.exists() for f in files)
    drain.begin()
    assert all(f.exists() for f in files)
    assert drain.deadline("orders") - drain.deadline("billing") == pytest.approx(4.0)
    drain.close_signal()
    assert not any(f.exists() for f in files)


def test_py4j_does_not_log_a_trace_for_a_batch_the_drain_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_py4j()
    logger = logging.getLogger("py4j.clientserver")
    for error in (DrainStopped(STOPPED_TEXT), RuntimeError("a real failure")):
        try:
            raise error
        except Exception:
            logger.exception("There was an exception while executing the Python Proxy")
    (record,) = caplog.records
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


CONFIG = """
[kafka]
bootstrap = "localhost:9092"
[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://localhost:50051"
deadline = "10s"
"""


def test_drain_timeout_defaults_to_the_deadline_and_is_a_duration() -> None:
    assert parse_config(CONFIG).route[0].drain_timeout_s == pytest.approx(12.0)
    route = parse_config(CONFIG + 'drain_timeout = "45s"\n').route[0]
    assert route.drain_timeout_s == 45.0
    for bad in ('"0s"', "30", '"soon"'):
        with pytest.raises(ConfigError, match="drain_timeout"):
            parse_config(CONFIG + f"drain_timeout = {bad}\n")


def test_a_stop_caught_in_a_failure_carries_no_trace_of_the_failure() -> None:
    # py4j hands Spark the whole Python traceback: a chained py4j error (with its long Java
    # trace) would come before the stop text and overflow Spark's regular expression.
    drain = Drain({"billing": 5.0})
    drain.stop(QUERY)
    try:
        try:
            raise RuntimeError("An error occurred while calling o42.collect\n" + "\tat x\n" * 500)
        except RuntimeError:
            drain.failed(QUERY, never_interrupted)
    except DrainStopped as stopped:
        text = "".join(traceback.format_exception(stopped))
    assert "o42.collect" not in text and text.rstrip().endswith(STOPPED_TEXT)
    try:
        try:
            raise RuntimeError("o43.collect")
        except RuntimeError:
            drain.failed(QUERY, interrupted)
    except DrainStopped as stopped:
        text = "".join(traceback.format_exception(stopped))
    assert "o43.collect" not in text and "py4j: java" not in text


def test_the_drain_hears_of_a_batch_after_its_group_commit() -> None:
    # A drain stops the queries once their batches are committed: the group's offsets must be
    # committed by then, or the group would show lag that is not there.
    from siding.pipeline.driver.commits import CommitTarget, make_listener

    calls: list[str] = []
    drain = Drain({"billing": 5.0})

    def committed(name: str, batch_id: int) -> None:
        calls.append("committed")
        drain.progressed(name, batch_id)

    listener = make_listener(
        cast(Any, None),  # no sources: nothing to commit
        {QUERY: CommitTarget("billing", "trips")},
        lambda *_: calls.append("progress"),
        committed,
    )
    drain.enter(QUERY, never_interrupted)
    drain.leave(QUERY, "billing", 4, results(acked=1))
    assert not drain.quiet([QUERY])

    class Progress:
        name = QUERY
        batchId = 4
        sources: tuple[object, ...] = ()

    class Event:
        progress = Progress()

    listener.onQueryProgress(Event())
    assert calls == ["progress", "committed"]
    assert drain.quiet([QUERY])
