"""foreachBatch glue: one micro-batch of one lane of one route, on the driver.

The batch returns (and Spark may commit its offsets) only when every task has delivered its slice
and written its lane records durably, the batch passed the DLQ-flood guard and its dead letters are
written (``flood``), and key mode's state (its waiting records) is written too. A route that must
stop raises ``RouteStopped``; ``guarded`` is the edge that turns it into one line and a clean stop
(``stops``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from siding import naming
from siding.config import RouteConfig
from siding.dispatch import OrderKey, WaitingRecord
from siding.errors import DlqFloodError, DurableWriteError, RouteStopped, SidingError
from siding.model import Ordering
from siding.pipeline.driver.batchlog import log_batch
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.drain import Drain, DrainStopped, Sleep
from siding.pipeline.driver.executors import executor_count
from siding.pipeline.driver.flood import flood_reason
from siding.pipeline.driver.keystate import KeyWaits
from siding.pipeline.driver.pager import DlqPager
from siding.pipeline.driver.progress_store import ProgressStore
from siding.pipeline.driver.stops import RouteStops, one_line
from siding.pipeline.executor.fence_gate import FencePlan
from siding.pipeline.executor.plan import TaskPlan, build_plan
from siding.pipeline.executor.progress import ProgressPlan
from siding.pipeline.executor.result import TaskResult
from siding.pipeline.executor.rows import SELECT_EXPR
from siding.pipeline.executor.task import deliver_partition
from siding.routing import story
from siding.routing.producer import DurableProducer, OutRecord, Placement
from siding.routing.settlement import Settlement
from siding.tracing.settings import TraceSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# Errors that mean "stop the route", not "try the batch again" (in a Spark error's text).
_FATAL_MARKERS = ("DlqFloodError", "EndpointGoneError")

# Set by Spark on the query's thread; a new checkpoint is a new query (docs/replay.md).
QUERY_ID_PROPERTY = "sql.streaming.queryId"

# try_*: a lane record without (or with a garbled) not-before header must not fail the batch;
# it is dead-lettered with a reason by the task instead.
NOT_BEFORE_EXPR = f"max(try_cast({story.sql_field(story.NOT_BEFORE)} as long)) AS nb"

T = TypeVar("T")


class BatchFailed(RouteStopped):
    """A batch could not get a durable outcome for every record; its offsets stay uncommitted."""


class TasksFailed(SidingError):
    """Tasks of a batch said they could not finish their slice (``TaskResult.failure``)."""

    def __init__(self, failures: list[TaskResult]) -> None:
        first = failures[0].failure
        more = f" (and {len(failures) - 1} more task(s))" if len(failures) > 1 else ""
        super().__init__(f"{first}{more}")
        self.retriable = all(f.retriable for f in failures)


def checked(results: list[TaskResult]) -> list[TaskResult]:
    """``results``, or ``TasksFailed`` when a task could not finish its slice."""
    failures = [r for r in results if r.failure]
    if failures:
        raise TasksFailed(failures)
    return results


@dataclass
class BatchSink:
    """Where batch results go on the driver (metrics, status, the demo's live view)."""

    on_result: Callable[[str, int, list[TaskResult], float], None] = lambda *_: None
    # (route, sent, letters): a DLQ page sent or dropped (``pager``).
    on_page: Callable[[str, bool, int], None] = lambda *_: None

    def report(self, route: str, lane: int, results: list[TaskResult], seconds: float) -> None:
        """Log the batch (summary, breaker transitions), then hand it to ``on_result``."""
        log_batch(route, lane, results, seconds)
        self.on_result(route, lane, results, seconds)


@dataclass(kw_only=True)
class BatchHandler(ABC):
    """The foreachBatch function of one of a route's queries (a lane, or its park lane): what
    every batch of it does around its own work. A paused route's batch waits before it starts
    (Spark commits nothing for it until resume); a drain holds it at its start and counts it at
    its end; its results then go to the sink."""

    route: RouteConfig
    lane: int
    client_conf: Mapping[str, object]
    stop: threading.Event
    # The cluster of the registry topic ([kafka]), when the route writes to another; None: same.
    registry_conf: Mapping[str, object] | None = None
    sink: BatchSink = field(default_factory=BatchSink)
    attempts: int = 3
    parallelism: int = 4
    controls: RouteControls = field(default_factory=RouteControls)
    drain: Drain = field(default_factory=Drain)
    # Whose in-flight budget the batch's calls count against: the route's, or a backfill's own.
    budget_scope: str = "live"
    # Where the application learns why a route stopped; without it (a backfill, a test) the
    # ``RouteStopped`` reaches the caller.
    stops: RouteStops | None = None
    # Writes the batch's dead letters on the driver (see ``_settle_letters``).
    letter_producer: DurableProducer | None = None
    # Why the route's checkpoint lock no longer guards it, or None (checked at each batch).
    lock_lost: Callable[[], str | None] = lambda: None
    # The fence the batch's tasks check their writes against (None: the route has none).
    fence: Callable[[], FencePlan | None] = lambda: None
    # Announces the letters once written ([route.dlq_page]); None: the route has no pager.
    pager: DlqPager | None = None
    # Called when the flood guard stops the route (the route marks it for its next start).
    on_flood: Callable[[], None] = lambda: None
    # [tracing] as resolved at start; None: off (no span, nothing of OpenTelemetry imported).
    tracing: TraceSettings | None = None

    @property
    def query(self) -> str:
        return naming.query_name(self.route.name, self.lane)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        guarded(
            self.drain,
            self.query,
            frame,
            lambda sleep: self._batch(frame, batch_id, sleep),
            self.stops,
        )

    def _batch(self, frame: DataFrame, batch_id: int, sleep: Sleep) -> None:
        self.controls.wait_while_paused(self.route.name, self.drain.requested)
        self._still_guarded()
        started = time.monotonic()
        self._wait_to_start(frame)
        self.drain.enter(self.query, sleep)
        results: list[TaskResult] | None = None
        try:
            try:
                results = self._deliver(frame, batch_id)
            except Exception:
                self._still_guarded()  # a lost fence is why, whatever failed with it
                raise
            self._still_guarded()  # Spark commits the batch once it returns
        finally:
            self.drain.leave(self.query, self.route.name, batch_id, results)
        self.sink.report(self.route.name, self.lane, results, time.monotonic() - started)

    def _still_guarded(self) -> None:
        lost = self.lock_lost()
        if lost is not None:  # another siding may have taken the route: deliver nothing more
            raise RouteStopped(f"route {self.route.name}: {lost}; stopped, nothing committed")

    @abstractmethod
    def _wait_to_start(self, frame: DataFrame) -> None:
        """Whatever the batch waits for before the drain counts it as started."""

    @abstractmethod
    def _deliver(self, frame: DataFrame, batch_id: int) -> list[TaskResult]:
        """The batch's own work: every record of ``frame`` gets its durable outcome."""

    def _where(self, batch_id: int) -> str:
        lane = "park lane" if self.lane == naming.PARK_LANE else f"lane {self.lane}"
        return f"route {self.route.name} {lane} batch {batch_id}"

    def _plan(
        self,
        tasks: int,
        waiting: Mapping[OrderKey, tuple[WaitingRecord, ...]],
        *,
        settlements: Mapping[str, Settlement] | None = None,
        drain_file: str = "",
        progress: ProgressPlan | None = None,
        executors: int = 1,
        batch_id: int = -1,
    ) -> TaskPlan:
        """What the batch's tasks get: the route as its controls have it now."""
        return build_plan(
            self.controls.effective(self.route),
            self.lane,
            self.client_conf,
            tasks,
            waiting,
            settlements=settlements,
            breaker_epoch=self.controls.breaker_epoch(self.route.name),
            registry_topic=self.controls.registry_topic,
            registry_conf=self.registry_conf,
            drain_file=drain_file,
            progress=progress,
            executors=executors,
            budget_scope=self.budget_scope,
            fence=self.fence(),
            tracing=self.tracing,
            batch_id=batch_id,
        )

    def _run_with_retries(self, run: Callable[[], T], batch_id: int) -> T:
        return run_with_retries(run, self._where(batch_id), self.stop, self.attempts)

    def _settle_letters(self, results: list[TaskResult], batch_id: int) -> list[TaskResult]:
        """The DLQ-flood guard over the whole batch, then its dead letters written (the batch
        may commit only after): ``DlqFloodError`` with none written when the share of DEAD is
        too large. Returns the results without their letters (the sinks need only counts)."""
        reason = flood_reason(self.route, self._where(batch_id), results)
        if reason is not None:
            self.on_flood()
            raise DlqFloodError(reason)
        letters = [letter for result in results for letter in result.letters]
        if letters:
            producer = self.letter_producer
            if producer is None:
                raise BatchFailed(f"{self._where(batch_id)}: no producer for its dead letters")
            started_ns = time.time_ns()
            placed = self._write_durably(producer, letters, "dead letters", batch_id)
            if self.tracing is not None:
                _letter_spans(self.tracing, self.route.group, letters, started_ns)
            self._page(letters, placed)
        return [replace(r, letters=()) if r.letters else r for r in results]

    def _page(self, letters: list[OutRecord], placed: tuple[Placement | None, ...]) -> None:
        """Announce letters Kafka has acknowledged (best effort: never fails the batch)."""
        if self.pager is None:
            return
        try:
            self.pager.offer(letters, placed)
        except Exception as exc:
            log.warning("route %s: DLQ page not queued: %s", self.route.name, one_line(str(exc)))

    def _write_durably(
        self, producer: DurableProducer, records: list[OutRecord], what: str, batch_id: int
    ) -> tuple[Placement | None, ...]:
        """Write ``records`` (again after a pause when it fails); where each went."""
        for attempt in range(1, self.attempts + 1):
            try:
                return producer.write_placed(records)
            except DurableWriteError as exc:
                if not exc.retriable:  # the fence is lost: never written
                    self._still_guarded()
                    raise RouteStopped(f"{self._where(batch_id)}: {one_line(str(exc))}") from exc
                if attempt == self.attempts or self.stop.is_set():
                    where = self._where(batch_id)
                    raise BatchFailed(f"{where}: {what} not written: {one_line(str(exc))}") from exc
                log.warning(
                    "%s: %s not written (attempt %d/%d), writing them again: %s",
                    self._where(batch_id),
                    what,
                    attempt,
                    self.attempts,
                    one_line(str(exc)),
                )
                self.stop.wait(min(30.0, 2.0**attempt))
        raise AssertionError("unreachable")


@dataclass(kw_only=True)
class LaneBatchHandler(BatchHandler):
    # Key mode's waiting records of the route, shared by all its lanes.
    waits: KeyWaits
    state_producer: DurableProducer
    progress: ProgressStore | None = None

    def _deliver(self, frame: DataFrame, batch_id: int) -> list[TaskResult]:
        rows = frame.selectExpr(*SELECT_EXPR)
        if self.route.ordering is Ordering.KEY:
            # All records of a key in one task, in log order; more tasks than Kafka
            # partitions. By key alone: the main lane's held records come from another
            # topic's partitions.
            tasks = max(self.parallelism, self.route.min_partitions)
            rows = rows.repartition(tasks, "key").sortWithinPartitions("partition", "offset")
        done = self._deliver_with_retries(rows, batch_id)
        if self.letter_producer is None:
            self.letter_producer = self.state_producer
        done = self._settle_letters(done, batch_id)
        events = [event for result in done for event in result.wait_events]
        with self.waits.write_lock:
            state = self.waits.apply(events)
            if state:
                self._write_durably(self.state_producer, state, "key state", batch_id)
        return done

    def _deliver_with_retries(self, rows: DataFrame, batch_id: int) -> list[TaskResult]:
        where = self._where(batch_id)
        query_id = rows.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or ""
        attempt = itertools.count(1)

        def run() -> list[TaskResult]:
            progress = self._progress_plan(query_id, batch_id, next(attempt))
            results = checked(self._run(rows, progress, batch_id))
            skipped = sum(r.skipped for r in results)
            if skipped:
                log.info(
                    "%s: %d record(s) made durable by an earlier attempt were not delivered again",
                    where,
                    skipped,
                )
            return results

        return self._run_with_retries(run, batch_id)

    def _progress_plan(self, query_id: str, batch_id: int, attempt: int) -> ProgressPlan | None:
        """Where tasks record their progress, with what earlier attempts of the batch recorded
        (read again before a second attempt in this driver; at start for the first)."""
        store, interval_s = self.progress, self.route.progress_interval
        if store is None or not query_id or interval_s <= 0:
            return None
        if attempt > 1:
            try:
                store.catch_up()
            except Exception as exc:  # nothing more known: delivered again
                log.warning("route %s: progress not read: %s", self.route.name, exc)
        known = store.known(self.query, query_id, batch_id)
        every = self.route.progress_every
        return ProgressPlan(store.topic, self.query, query_id, batch_id, interval_s, known, every)

    def _run(
        self, rows: DataFrame, progress: ProgressPlan | None = None, batch_id: int = -1
    ) -> list[TaskResult]:
        rdd = rows.rdd
        plan = self._plan(
            rdd.getNumPartitions(),
            self.waits.snapshot(),
            drain_file=self.drain.signal_file(self.route.name),
            progress=progress,
            executors=executor_count(rdd.context),
            batch_id=batch_id,
        )
        results: list[TaskResult] = rdd.mapPartitionsWithIndex(deliver_partition(plan)).collect()
        return results

    def _wait_to_start(self, frame: DataFrame) -> None:
        """Hold a retry-lane batch on the driver until its records may go: a sleeping task would
        take an executor slot that the main lane needs."""
        if self.lane <= 0:
            return
        row: Any = frame.selectExpr(NOT_BEFORE_EXPR).collect()[0]
        not_before_ms = row["nb"]
        if not_before_ms is None:
            return
        # Never longer than the lane's own delay: records due later (a long Retry-After) are put
        # back into the lane by the task instead of holding everything behind them.
        delay_s = self.route.lanes_as_model()[self.lane - 1].delay_s
        wait_s = min(not_before_ms / 1000 - time.time(), delay_s)
        if wait_s > 0:
            self.drain.requested.wait(wait_s)  # a drain (or stop) holds the batch instead


def jvm_sleep(frame: DataFrame) -> Sleep:
    """``Thread.sleep`` in the JVM, on the query's own thread: py4j runs a call made from a
    foreachBatch function on the JVM thread that called it (pinned threads), so the query's
    stop interrupts it."""
    jvm: Any = frame.sparkSession.sparkContext._jvm

    def sleep(ms: int) -> None:
        jvm.java.lang.Thread.sleep(ms)

    return sleep


def guarded(
    drain: Drain,
    query: str,
    frame: DataFrame,
    batch: Callable[[Sleep], None],
    stops: RouteStops | None = None,
) -> None:
    """Run a foreachBatch function; an error while its query is being stopped ends the batch
    as a stop (``DrainStopped``: no trace, nothing committed) instead of failing the query.

    The edge of a route's stop: with ``stops``, any other error (``RouteStopped`` says why in
    its message; anything else by its first line) is recorded as the reason the route stopped,
    the application is asked to stop, and the batch ends as a stop too, so neither Spark nor
    py4j prints a trace for it (docs/operations.md, "When a route stops")."""
    sleep = jvm_sleep(frame)
    try:
        batch(sleep)
    except DrainStopped:
        raise
    except Exception as exc:
        # While the application stops (a signal, or another route's stop) an error is the stop.
        if stops is not None and not stops.stop.is_set() and not drain.stopping(query):
            reason = stop_reason(query, exc)
            if stops.record(reason):
                log.error("%s", reason)
            log.debug("%s stopped", query, exc_info=True)
        drain.failed(query, sleep)
        raise


def stop_reason(query: str, exc: BaseException) -> str:
    """Pure: the line a route stops with for ``exc``: its own for a ``RouteStopped``, else the
    query's name and the error's useful line."""
    if isinstance(exc, RouteStopped):
        return exc.reason
    return f"{query} stopped: {type(exc).__name__}: {_summary(str(exc))}"


def run_with_retries(run: Callable[[], T], where: str, stop: threading.Event, attempts: int) -> T:
    """Run a batch's Spark job, again after a pause when it fails, until ``attempts`` ran out
    or the failure says to stop the route; raises ``BatchFailed`` naming ``where``."""
    for attempt in range(1, attempts + 1):
        if stop.is_set():
            raise BatchFailed(f"{where}: stopping; not committed")
        try:
            return run()
        except Exception as exc:
            if stop.is_set():
                raise BatchFailed(f"{where}: stopping; not committed") from exc
            text = str(exc)
            if isinstance(exc, TasksFailed):
                fatal = not exc.retriable
            else:
                fatal = any(marker in text for marker in _FATAL_MARKERS)
            if fatal or attempt == attempts:
                raise BatchFailed(f"{where}: {_summary(text)}") from exc
            log.warning(
                "%s failed (attempt %d/%d), running it again: %s",
                where,
                attempt,
                attempts,
                _summary(text),
            )
            stop.wait(min(30.0, 2.0**attempt))
    raise AssertionError("unreachable")


def _summary(text: str) -> str:
    """The useful line of a Spark/py4j error: siding's own message when there is one."""
    for line in text.splitlines():
        for marker in ("siding.errors.", "SidingError", "DurableWriteError", *_FATAL_MARKERS):
            if marker in line:
                return line.strip()[:500]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else text)[:500]


def _letter_spans(
    settings: TraceSettings, group: str, letters: list[OutRecord], started_ns: int
) -> None:
    """A span per written dead letter (best effort: a span never fails the batch)."""
    from siding.tracing.task import letter_spans

    try:
        letter_spans(settings, group, letters, started_ns, time.time_ns())
    except Exception as exc:
        log.warning("tracing: dead-letter spans failed: %s", exc)
