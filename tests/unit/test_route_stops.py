"""Every way a route stops ends on one line (issue 27, item 2): the DLQ-flood guard judged per
batch on the driver, a task's failure said in one line, a lane or letter write that fails after
its attempts, an endpoint gone, a query that dies; all recorded at the batch's edge and raised
by the application as the reason. End to end: tests/e2e/test_route_stops.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from siding.config import parse_config
from siding.errors import (
    DlqFloodError,
    DurableWriteError,
    EndpointGoneError,
    RouteStopped,
)
from siding.model import Outcome, OutcomeKind
from siding.pipeline.driver.app import Application
from siding.pipeline.driver.batch import (
    BatchFailed,
    BatchHandler,
    TasksFailed,
    checked,
    guarded,
    run_with_retries,
    stop_reason,
)
from siding.pipeline.driver.drain import Drain, DrainStopped
from siding.pipeline.driver.flood import flood_reason
from siding.pipeline.driver.park_batch import ParkBatchHandler
from siding.pipeline.driver.settlements import SettlementStore
from siding.pipeline.driver.stops import RouteStops, one_line
from siding.pipeline.driver.topics import RouteFailed
from siding.pipeline.executor.result import TaskResult
from siding.pipeline.executor.task import failed
from siding.pipeline.offline.route_lock import RouteLock
from siding.routing.producer import DurableProducer, OutRecord, Placement
from siding.routing.settlement import Settlement, settlement_record
from siding.steps import StepCounts
from tests.unit.test_config import BASE

CONFIG = parse_config(BASE, env={})
ROUTE = CONFIG.route[0].model_copy(update={"dlq_flood_ratio": 0.5, "dlq_flood_min_batch": 20})
WHERE = f"route {ROUTE.name} lane 0 batch 3"


def task(records: int, dead: int, letters: int = 0) -> TaskResult:
    acked = records - dead
    return TaskResult(
        counts=StepCounts(records=records, acked=acked, to_dlq=dead),
        dead_reasons={"consumer said dead": dead} if dead else {},
        letters=tuple(OutRecord("dlq", None, b"v", ()) for _ in range(letters)),
    )


# --- the guard, per batch --------------------------------------------------------------------


def test_tasks_each_too_small_to_judge_add_up_to_a_flood() -> None:
    # Given two tasks of 15 records each, all DEAD (each below the 20-record minimum)
    results = [task(15, 15), task(15, 15)]
    # Then the batch of 30 is judged, and the line names the route, the share and the setting
    assert flood_reason(ROUTE, WHERE, results) == (
        f"{WHERE}: 30 of 30 records turned DEAD (100%), more than dlq_flood_ratio = 0.5; none was"
        " dead-lettered and the batch is not committed (reasons: consumer said dead 30); fix the"
        " consumer, then start siding again"
    )


def test_one_dead_task_in_a_healthy_batch_is_not_a_flood() -> None:
    # Given one task all DEAD (30 of 30) beside one of 70 healthy records: 30 % of the batch
    assert flood_reason(ROUTE, WHERE, [task(30, 30), task(70, 0)]) is None
    # And a batch below the minimum is never judged; a ratio of 1 turns the guard off
    assert flood_reason(ROUTE, WHERE, [task(19, 19)]) is None
    off = ROUTE.model_copy(update={"dlq_flood_ratio": 1.0})
    assert flood_reason(off, WHERE, [task(100, 100)]) is None


class Recording(DurableProducer):
    """A producer that records what it is asked to write, or fails ``failures`` times."""

    def __init__(self, failures: int = 0) -> None:  # no client: nothing reaches Kafka
        self.written: list[OutRecord] = []
        self.failures = failures

    def write(self, records: Sequence[OutRecord], timeout_s: float = 60.0) -> None:  # noqa: ARG002
        if self.failures:
            self.failures -= 1
            raise DurableWriteError("1 record(s) not written: dlq: Broker: Unknown topic")
        self.written += records

    def write_placed(
        self, records: Sequence[OutRecord], timeout_s: float = 60.0
    ) -> tuple[Placement | None, ...]:
        self.write(records, timeout_s)
        return (None,) * len(records)


@dataclass(kw_only=True)
class Plain(BatchHandler):
    results: list[TaskResult] = field(default_factory=list)

    def _wait_to_start(self, frame: Any) -> None:
        pass

    def _deliver(self, frame: Any, batch_id: int) -> list[TaskResult]:  # noqa: ARG002
        return self._settle_letters(self.results, batch_id)


def handler(results: list[TaskResult], producer: Recording) -> Plain:
    return Plain(
        route=ROUTE,
        lane=0,
        client_conf={},
        stop=threading.Event(),
        results=results,
        letter_producer=producer,
        attempts=2,
    )


def test_a_flooded_batch_writes_none_of_its_letters() -> None:
    producer = Recording()
    made = handler([task(15, 15, letters=15), task(15, 15, letters=15)], producer)
    with pytest.raises(DlqFloodError, match=r"30 of 30 records turned DEAD \(100%\)"):
        made._deliver(None, 3)
    assert producer.written == []


def test_a_healthy_batch_writes_its_letters_before_it_returns_without_them() -> None:
    producer = Recording()
    made = handler([task(30, 3, letters=3), task(70, 0)], producer)
    done = made._deliver(None, 3)
    assert len(producer.written) == 3
    assert [r.letters for r in done] == [(), ()]
    assert [r.counts.to_dlq for r in done] == [3, 0]  # the sinks still count them


def test_letters_not_written_after_the_attempts_stop_the_route_on_one_line() -> None:
    made = handler([task(30, 3, letters=3)], Recording(failures=5))
    with pytest.raises(BatchFailed) as caught:
        made._deliver(None, 3)
    assert caught.value.reason == (
        f"{WHERE}: dead letters not written: 1 record(s) not written: dlq: Broker: Unknown topic"
    )


# --- tasks say why in one line; the driver decides --------------------------------------------


def test_a_task_error_becomes_one_line_with_its_retriable_flag() -> None:
    gone = failed(EndpointGoneError("t/0/5: HTTP 410 Gone\n  a second line"))
    assert (gone.failure, gone.retriable) == ("EndpointGoneError: t/0/5: HTTP 410 Gone", False)
    write = failed(DurableWriteError("2 record(s) not written: out: Broker: Unknown topic"))
    assert write.retriable and write.failure.startswith("DurableWriteError: 2 record(s)")
    assert checked([task(1, 0)]) == [task(1, 0)]
    with pytest.raises(TasksFailed, match=r"^EndpointGoneError: .* \(and 1 more task\(s\)\)$"):
        checked([gone, task(1, 0), write])


class NoPause(threading.Event):
    """A stop event whose waits between attempts return at once (a unit test does not pause)."""

    def wait(self, timeout: float | None = None) -> bool:  # noqa: ARG002
        return False


def test_a_lane_write_that_keeps_failing_is_run_again_then_stops_the_route() -> None:
    calls: list[int] = []
    write = failed(DurableWriteError("1 record(s) not written: out: Broker: Unknown topic"))

    def run() -> list[TaskResult]:
        calls.append(1)
        return checked([write])

    with pytest.raises(BatchFailed) as caught:
        run_with_retries(run, WHERE, NoPause(), attempts=3)
    assert len(calls) == 3
    assert caught.value.reason == f"{WHERE}: {write.failure}"


def test_an_endpoint_gone_stops_the_route_at_once() -> None:
    calls: list[int] = []
    gone = failed(EndpointGoneError("t/0/5: HTTP 410 Gone"))

    def run() -> list[TaskResult]:
        calls.append(1)
        return checked([gone])

    with pytest.raises(BatchFailed, match="EndpointGoneError: t/0/5: HTTP 410 Gone"):
        run_with_retries(run, WHERE, threading.Event(), attempts=3)
    assert len(calls) == 1


# --- the edge: recorded once, the batch ends as a stop, the application raises the line -------


def frame(interrupted: bool) -> Any:
    """What ``jvm_sleep`` reaches for: a JVM whose ``Thread.sleep`` is interrupted by the stop."""

    def sleep(_ms: int) -> None:
        if interrupted:
            raise RuntimeError("java.lang.InterruptedException")

    thread = SimpleNamespace(sleep=sleep)
    jvm = SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(Thread=thread)))
    return SimpleNamespace(sparkSession=SimpleNamespace(sparkContext=SimpleNamespace(_jvm=jvm)))


def test_a_route_stopped_in_a_batch_is_recorded_and_the_batch_ends_as_a_stop() -> None:
    stop = threading.Event()
    stops = RouteStops(stop)
    drain = Drain({ROUTE.name: 5.0}, hard=stop)

    def batch(_sleep: Any) -> None:
        raise DlqFloodError(f"{WHERE}: 30 of 30 records turned DEAD (100%)\nmore")

    # When a batch raises RouteStopped, the query's stop interrupts its hold
    with pytest.raises(DrainStopped) as caught:
        guarded(drain, "siding.billing.main", frame(interrupted=True), batch, stops)
    # Then it ends as a stop (no trace of the error chained), the reason kept, the app asked
    assert caught.value.__suppress_context__
    assert stops.reason == f"{WHERE}: 30 of 30 records turned DEAD (100%)"
    assert stop.is_set()
    # And a second route's stop does not replace the first reason
    assert not stops.record("route other lane 1 batch 1: later")
    assert stops.reason == f"{WHERE}: 30 of 30 records turned DEAD (100%)"


def test_any_other_error_of_a_batch_is_said_by_its_query_and_first_useful_line() -> None:
    error = RuntimeError("An error occurred\n  siding.errors.DurableWriteError: out: gone\n  at x")
    assert stop_reason("siding.billing.main", error) == (
        "siding.billing.main stopped: RuntimeError: siding.errors.DurableWriteError: out: gone"
    )
    assert stop_reason("q", RouteStopped("route billing: why\ntrace")) == "route billing: why"
    assert one_line("\n\n  first  \nsecond") == "first"


def test_without_stops_a_route_stopped_reaches_the_caller() -> None:
    # (a backfill runs its batches itself: its command prints the line)
    def batch(_sleep: Any) -> None:
        raise DlqFloodError("route billing: flood")

    with pytest.raises(DlqFloodError):
        guarded(Drain({}), "q", frame(interrupted=False), batch)


def test_the_application_ends_with_the_recorded_reason() -> None:
    app = Application(CONFIG)
    app.stops.record(f"{WHERE}: 30 of 30 records turned DEAD (100%)")
    with pytest.raises(RouteFailed) as caught:
        app.run(poll_s=0.01)
    assert str(caught.value) == f"{WHERE}: 30 of 30 records turned DEAD (100%)"
    assert isinstance(caught.value, RouteStopped)


def test_a_hard_stop_asked_by_a_signal_is_not_a_route_stop() -> None:
    app = Application(CONFIG)
    app.stop_event.set()
    app.run(poll_s=0.01)  # returns: no reason recorded
    assert app.stops.reason is None


# --- the park lane: a flood of DEAD answers is forgotten, so the restart asks again ------------


def test_a_flood_stop_forgets_every_dead_answer_now_and_at_the_next_start() -> None:
    # Given settlements of parked calls: 25 answered DEAD, one ACKed, and 3 more DEAD answers
    # for parked records of a later batch (the same bad deploy gave them)
    log: list[tuple[bytes, bytes | None]] = []
    read_upto = [0]

    def read_new() -> list[tuple[bytes, bytes | None]]:
        new = log[read_upto[0] :]
        read_upto[0] = len(log)
        return new

    def write(records: Sequence[OutRecord]) -> None:
        log.extend((r.key or b"", r.value) for r in records)

    now_ms = int(time.time() * 1000)

    def answer(token: str, kind: OutcomeKind) -> None:
        record = settlement_record("settled", Settlement(token, Outcome(kind), now_ms))
        log.append((record.key or b"", record.value))

    answers = {f"d{i}": OutcomeKind.DEAD for i in range(25)} | {"ok": OutcomeKind.ACK}
    later = {f"later{i}": OutcomeKind.DEAD for i in range(3)}
    for token, kind in (answers | later).items():
        answer(token, kind)
    store = SettlementStore("settled", read_new, write)
    store.catch_up()
    flooded: list[bool] = []
    park = ParkBatchHandler(
        route=ROUTE,
        client_conf={},
        settlements=store,
        stop=threading.Event(),
        on_flood=lambda: flooded.append(bool(store.mark_flood())),
    )
    # When its batch floods (the driver's judgement over the batch)
    with pytest.raises(DlqFloodError):
        park._settle_letters([task(26, 25, letters=25)], 4)
    # Then the route marks the stop and only the ACK is still known: the restarted park lane
    # asks again about the DEAD ones, the later batch's included
    assert flooded == [True]
    store.catch_up()
    assert set(store.snapshot()) == {"ok"}
    # When a parked call answers DEAD after that, before the process is gone
    answer("straggler", OutcomeKind.DEAD)
    # Then the next start (a new store over the same topic) forgets it too, and the mark
    restarted = SettlementStore("settled", iter_all(log), write)
    restarted.catch_up()
    assert "straggler" in restarted.snapshot()
    assert restarted.after_flood() == 1
    assert set(restarted.snapshot()) == {"ok"}
    # And the start after that one keeps DEAD answers again (the mark is gone)
    answer("later-dead", OutcomeKind.DEAD)
    again = SettlementStore("settled", iter_all(log), write)
    again.catch_up()
    assert again.after_flood() == 0
    assert set(again.snapshot()) == {"ok", "later-dead"}


def iter_all(
    log: list[tuple[bytes, bytes | None]],
) -> Callable[[], list[tuple[bytes, bytes | None]]]:
    """A reader of the whole topic from its start, once (what a new store reads at a start)."""
    done = [False]

    def read_new() -> list[tuple[bytes, bytes | None]]:
        if done[0]:
            return []
        done[0] = True
        return list(log)

    return read_new


# --- the checkpoint lock removed or replaced under a running route ---------------------------


def test_a_lock_file_removed_or_replaced_is_a_lost_lock(tmp_path: Path) -> None:
    lock = RouteLock(tmp_path, "siding run of route billing").acquire()
    try:
        assert lock.lost() is None
        lock.path.unlink()  # the checkpoint folder deleted under the route
        assert lock.lost() == f"its checkpoint lock {lock.path} was removed while it ran"
        other = RouteLock(tmp_path, "a second siding").acquire()  # which now succeeds
        try:
            assert lock.lost() == f"its checkpoint lock {lock.path} was replaced while it ran"
        finally:
            other.release()
    finally:
        lock.release()
    assert lock.lost() is None  # released: nothing to lose


@dataclass(kw_only=True)
class Counting(BatchHandler):
    delivered: int = 0

    def _wait_to_start(self, frame: Any) -> None:
        pass

    def _deliver(self, frame: Any, batch_id: int) -> list[TaskResult]:  # noqa: ARG002
        self.delivered += 1
        return []


def test_a_batch_of_a_route_whose_lock_is_lost_delivers_nothing_and_stops_it() -> None:
    made = Counting(
        route=ROUTE,
        lane=0,
        client_conf={},
        stop=threading.Event(),
        lock_lost=lambda: "its checkpoint lock /c/billing/siding.lock was removed while it ran",
    )
    with pytest.raises(RouteStopped) as caught:
        made._batch(None, 5, lambda _ms: None)  # type: ignore[arg-type]
    assert made.delivered == 0
    assert caught.value.reason == (
        f"route {ROUTE.name}: its checkpoint lock /c/billing/siding.lock was removed while it"
        " ran; stopped, nothing committed"
    )
