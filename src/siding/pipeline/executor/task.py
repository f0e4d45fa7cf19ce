"""One Spark task: deliver its slice of a batch, then write its lane, park and hold records
durably and hand its dead letters to the driver.

The task returns only after Kafka acknowledged every record it writes; its dead letters are
written by the driver once the whole batch passed the DLQ-flood guard (docs/dispatch.md), and
only then may the batch commit (invariant 1).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, assert_never

from siding import naming
from siding.dispatch import (
    DispatchReport,
    DispatchSettings,
    Settled,
    Work,
    dispatch,
)
from siding.dispatch.keyorder import HELD, WaitEvent, order_key
from siding.dispatch.trace import SuspectTrace
from siding.errors import SidingError
from siding.model import DeadClass, DeadKind, Delivery, LaneHop
from siding.pipeline.executor import fence_gate
from siding.pipeline.executor.budget import budget_dir, budget_path, shared_budget
from siding.pipeline.executor.parked import Adoption
from siding.pipeline.executor.plan import TaskPlan
from siding.pipeline.executor.progress_task import Tracker, begin
from siding.pipeline.executor.result import TaskResult
from siding.pipeline.executor.rows import Incoming, incoming, too_large
from siding.pipeline.executor.worker import POOL, runtime
from siding.routing.outputs import output_records
from siding.routing.producer import OutRecord
from siding.routing.records import (
    dlq_record,
    hold_record,
    lane_record,
    park_record,
    requeue_record,
)
from siding.steps import (
    Done,
    Held,
    Parked,
    Resent,
    Step,
    StepCounts,
    ToDlq,
    ToLane,
    reason_class,
)
from siding.transport.base import Transport

if TYPE_CHECKING:
    from siding.tracing.task import TaskTrace

_DUE_SLACK_MS = 1000
DRAIN_POLL_S = 0.1
# An in-flight report is best effort: it waits this long for Kafka, then the next one replaces it.
LIVE_WRITE_S = 5.0


def route_out(
    plan: TaskPlan, settled: Sequence[Settled], hops: dict[str, tuple[LaneHop, ...]], now_ms: int
) -> list[OutRecord]:
    """The records to write for each item's step, in item order (a ``Done`` item's outputs)."""
    out: list[OutRecord] = []
    route = plan.route.name
    for item in settled:
        delivery = item.work.delivery
        before = (*hops.get(delivery.id, ()), *item.work.hops)
        match item.step:
            case Done(outputs=outputs):
                # Written with the lane records, acknowledged before the task returns (outputs.md).
                out += output_records(delivery, outputs, route)
            case ToLane() as step:
                lane_topic = retry_topic(plan, delivery)
                out.append(
                    lane_record(
                        delivery,
                        step,
                        hops=before,
                        now_ms=now_ms,
                        route=route,
                        lane_topic=lane_topic,
                    )
                )
            case Parked(token=token, not_before_ms=not_before_ms, deaths=deaths, lone=lone):
                out.append(
                    park_record(
                        delivery,
                        token=token,
                        not_before_ms=not_before_ms,
                        hops=before,
                        route=route,
                        park_topic=plan.park_topic,
                        deaths=deaths,
                        lone=lone,
                    )
                )
            case Held() as step:
                out.append(
                    hold_record(
                        delivery, step, hops=before, route=route, hold_topic=plan.hold_topic
                    )
                )
            case ToDlq() as step:
                out.append(
                    dlq_record(
                        delivery,
                        step,
                        hops=before,
                        now_ms=now_ms,
                        route=route,
                        dlq_topic=plan.dlq_topic,
                    )
                )
            case Resent(not_before_ms=not_before_ms):
                lane_topic = retry_topic(plan, delivery)
                out.append(
                    requeue_record(
                        delivery,
                        not_before_ms=not_before_ms,
                        hops=before,
                        route=route,
                        lane_topic=lane_topic,
                    )
                )
            case _:  # a new step must say here what it writes
                assert_never(item.step)
    return out


def retry_topic(plan: TaskPlan, delivery: Delivery) -> Callable[[int], str]:
    """Where a record that must be retried waits: its lane's topic, or in key mode (a record
    with a key) the hold topic, where the main lane's own loop retries it when it is due and
    then releases the records held behind it (docs/dispatch.md, "Key ordering")."""
    if order_key(delivery, plan.route.ordering) is None:
        return plan.lane_topic
    return lambda _lane: plan.hold_topic


def slice_work(plan: TaskPlan, items: Sequence[Incoming], skip: set[str]) -> list[Work]:
    """The items to dispatch; a retried record in the main lane's loop keeps its lane's
    deadline and its not-before time: the window delivers it if it falls due while the batch
    runs, else writes it back unchanged (``Resent``), its key still blocked
    (``siding.dispatch.inbatch``)."""
    lanes = plan.settings.lanes
    return [
        Work(
            i.delivery,
            i.not_before_ms,
            deadline_s=lanes[i.delivery.lane - 1].deadline_s
            if plan.lane == 0 and 1 <= i.delivery.lane <= len(lanes)
            else None,
        )
        for i in items
        if not i.malformed and i.delivery.id not in skip
    ]


def wait_events(plan: TaskPlan, settled: Iterable[Settled]) -> tuple[WaitEvent, ...]:
    """Key mode: a record that went to a lane waits there, one that waits behind an earlier
    record of its key is held; one that finished is released."""
    events: list[WaitEvent] = []
    for item in settled:
        key = order_key(item.work.delivery, plan.route.ordering)
        if key is None:
            continue
        offset = item.work.delivery.offset
        match item.step:
            case ToLane(lane=lane, not_before_ms=not_before_ms):
                events.append(WaitEvent(key, offset, lane, not_before_ms))
            case Held():
                events.append(WaitEvent(key, offset, HELD))
            case Done() | ToDlq():
                if plan.lane > 0 or key in plan.waiting:
                    events.append(WaitEvent(key, offset, None))
            case Parked() | Resent():
                pass  # key mode never parks calls; a resent record's key stays blocked
            case _:  # a new step must say here whether it releases its key
                assert_never(item.step)
    return tuple(events)


def _malformed(items: Sequence[Incoming]) -> list[Settled]:
    return [Settled(Work(i.delivery), i.dead_letter) for i in items if i.malformed]


def screen(items: Sequence[Incoming], limit: int) -> list[Incoming]:
    """Items that cannot be delivered get ``malformed`` set: garbled lane records keep their
    reason, and records larger than the route's ``max_message_bytes`` are dead-lettered unsent
    (a consumer's transport refusing them would look like an outage and loop for ever)."""
    return [
        i
        if i.malformed or not (reason := too_large(i, limit))
        else replace(i, malformed=reason, dead_class=DeadClass(DeadKind.TOO_LARGE))
        for i in items
    ]


def not_due(plan: TaskPlan, items: Sequence[Incoming], now_ms: int) -> list[Incoming]:
    """Lane records due later than the lane's own delay from now (a consumer's long
    Retry-After): they go back to the lane instead of holding this batch and the ones after it."""
    if plan.lane == 0:
        return []
    horizon = now_ms + int(plan.settings.lanes[plan.lane - 1].delay_s * 1000) + _DUE_SLACK_MS
    return [i for i in items if not i.malformed and i.not_before_ms > horizon]


def run_slice(
    plan: TaskPlan,
    rows: Iterable[Sequence[Any]],
    partition_id: int,
    progress: Tracker | None = None,
) -> TaskResult:
    """Deliver one slice and write its lane/DLQ records; raises if anything is not durable.
    ``progress`` records what becomes durable and leaves out what already is (docs/replay.md)."""
    began = time.monotonic()
    progress = progress or Tracker(None, partition_id)
    items = screen(incoming(rows, plan.lane, plan.hold_topic), plan.route.message_limit)
    items = progress.screen(plan, items)
    if not items:
        return TaskResult(pid=os.getpid(), host=socket.gethostname(), skipped=progress.skipped)
    now_ms = int(time.time() * 1000)
    later = not_due(plan, items, now_ms)
    work = slice_work(plan, items, {i.delivery.id for i in later})
    hops = {i.delivery.id: i.hops for i in items if i.hops}
    read_s = time.monotonic() - began
    progress.expect(len(work))
    trace = task_trace(plan)
    watch = progress.watch if trace is None else _traced_watch(progress.watch, trace)
    report = deliver(plan, plan.settings, work, partition_id, watch=watch)
    dispatched_s = time.monotonic() - began
    settled = [*report.settled, *_malformed(items)]
    route = plan.route
    resent = [Settled(Work(i.delivery), Resent(i.not_before_ms)) for i in later]
    out, letters = split_letters(plan, [*settled, *resent], hops, int(time.time() * 1000))
    if out:
        fence_gate.check(plan.fence, plan.client_conf)
        started_ns = time.time_ns()
        runtime().producer(plan.client_conf).write(out)
        if trace is not None:
            kept = [s for s in settled if not is_dead(s)]
            trace.wrote(kept, lambda d, step: topic_of(plan, d, step), started_ns, time.time_ns())
    # The dead ones are not durable yet: the driver writes them after judging the batch.
    progress.written(plan, pending={s.work.delivery.id for s in settled if is_dead(s)})
    if os.environ.get("SIDING_TRACE_TASKS"):
        # Lands in the executor's stderr log: which process delivered what (scale-out checks).
        print(
            f"siding-task route={route.name} lane={plan.lane} records={len(settled)}"
            f" parked={len(report.parked)} read={read_s:.3f}s dispatched={dispatched_s:.3f}s"
            f" written={time.monotonic() - began:.3f}s pid={os.getpid()}"
            f" host={socket.gethostname()}",
            file=sys.stderr,
            flush=True,
        )
    return tally(
        settled,
        running_parked=running_parked(report),
        stats=report.stats,
        wait_events=wait_events(plan, settled),
        dead_reasons=dead_reasons(settled),
        skipped=progress.skipped,
        letters=tuple(letters),
        spans_dropped=trace.dropped() if trace is not None else 0,
    )


def task_trace(plan: TaskPlan) -> TaskTrace | None:
    """The task's spans where ``[tracing]`` is on; with it off, OpenTelemetry is not imported."""
    if plan.tracing is None:
        return None
    from siding.tracing.task import TaskTrace

    return TaskTrace(plan.tracing, plan.route.name, plan.route.group)


def _traced_watch(
    watch: Callable[[Transport], Transport], trace: TaskTrace
) -> Callable[[Transport], Transport]:
    return lambda transport: trace.wrap(watch(transport))


def topic_of(plan: TaskPlan, delivery: Delivery, step: Step) -> str:
    """Where the task writes ``delivery`` for ``step`` (a traced write's destination)."""
    match step:
        case ToLane(lane=lane):
            return retry_topic(plan, delivery)(lane)
        case Parked():
            return plan.park_topic
        case Held():
            return plan.hold_topic
        case ToDlq():
            return plan.dlq_topic
        case _:
            return ""


def is_dead(item: Settled) -> bool:
    return isinstance(item.step, ToDlq)


def split_letters(
    plan: TaskPlan, settled: Sequence[Settled], hops: dict[str, tuple[LaneHop, ...]], now_ms: int
) -> tuple[list[OutRecord], list[OutRecord]]:
    """(the records the task writes, its dead letters for the driver), each in item order."""
    kept = [s for s in settled if not is_dead(s)]
    return route_out(plan, kept, hops, now_ms), route_out(plan, dead_items(settled), hops, now_ms)


def dead_items(settled: Sequence[Settled]) -> list[Settled]:
    return [s for s in settled if is_dead(s)]


def failed(exc: SidingError) -> TaskResult:
    """A task that could not finish: one line for the driver instead of a failed Spark task."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return TaskResult(
        pid=os.getpid(),
        host=socket.gethostname(),
        failure=f"{type(exc).__name__}: {line}"[:500],
        retriable=exc.retriable,
    )


def running_parked(report: DispatchReport) -> tuple[tuple[str, int], ...]:
    """(token, not-before ms) of each call the dispatch parked still running."""
    not_before = {
        step.token: step.not_before_ms for s in report.settled if isinstance(step := s.step, Parked)
    }
    return tuple((call.token, not_before[call.token]) for call in report.parked)


def dead_letters(settled: Iterable[Settled]) -> list[ToDlq]:
    """The steps of the items that go to the DLQ."""
    return [step for s in settled if isinstance(step := s.step, ToDlq)]


def dead_reasons(settled: Iterable[Settled]) -> dict[str, int]:
    """Dead letters counted by ``reason_class``."""
    return dict(Counter(reason_class(d.reason, d.dead_class) for d in dead_letters(settled)))


def tally(settled: Sequence[Settled], **extra: Any) -> TaskResult:
    """A task's result: its records counted by step, plus ``extra`` fields."""
    return TaskResult(
        counts=StepCounts.of(s.step for s in settled),
        pid=os.getpid(),
        host=socket.gethostname(),
        **extra,
    )


def deliver(
    plan: TaskPlan,
    settings: DispatchSettings,
    work: Sequence[Work],
    partition_id: int,
    watch: Callable[[Transport], Transport] | None = None,
) -> DispatchReport:
    """Dispatch ``work`` on the worker's loop; calls it parks go on running there and are
    settled when they answer. Every call, parked or not, holds a slot of the budget of the
    route and endpoint that all the machine's workers share until it ends; the adaptive limit
    goes on from where the worker's last window of this endpoint and lane left it.
    ``watch`` wraps the transport for this dispatch (the task's progress sees its ACKs)."""
    rt = runtime()
    route = plan.route
    # The connection pool is sized for the whole route: the transport outlives this batch.
    if plan.registry_topic:
        key = (route.name, POOL)
        transport, breaker, timer = rt.pool(
            route,
            registry_topic=plan.registry_topic,
            client_conf=plan.registry_conf or plan.client_conf,
            breaker=settings.breaker,
            connections=route.max_in_flight,
            breaker_epoch=plan.breaker_epoch,
        )
    else:
        endpoint = route.endpoint[partition_id % len(route.endpoint)]
        key = (route.name, endpoint.url)
        transport, breaker, timer = rt.endpoint(
            route, endpoint, settings.breaker, route.max_in_flight, plan.breaker_epoch
        )
    if watch is not None:
        transport = watch(transport)
    if plan.live_topic:
        transport = rt.live.counting(route.name, transport)
        reports = rt.producer(plan.client_conf, use="live")
        rt.live.report_to(route.name, plan.live_topic, lambda out: reports.write(out, LIVE_WRITE_S))
    budget = shared_budget(
        budget_path(budget_dir(), route.name, key[1], plan.budget_scope),
        settings.max_in_flight,
        settings.rate_limit,
        settings.rate_burst,
    )
    report = rt.run(
        _dispatch_until_drained(
            plan.drain_file,
            transport,
            work,
            settings,
            waiting=plan.waiting,
            breaker=breaker,
            park_timer=timer,
            limits=rt.limits(key),
            budget=budget,
            trace=suspect_trace(plan, partition_id),
        )
    )
    if report.parked:
        settle = rt.producer(plan.client_conf, use="settlements").write
        writer = fence_gate.guarded(plan.fence, plan.client_conf, settle)
        adoption = Adoption(key, plan.settle_topic, timer, breaker, writer, route.name)
        rt.loop.call_soon_threadsafe(rt.parked.adopt, report.parked, adoption)
    return report


def suspect_trace(plan: TaskPlan, partition_id: int) -> SuspectTrace:
    """Where a task's suspect trace lines come from (``siding.dispatch.trace``)."""
    lane = "park" if plan.lane == naming.PARK_LANE else str(plan.lane)
    return SuspectTrace(f"lane={lane} batch={plan.batch_id} task={partition_id}")


async def _dispatch_until_drained(
    drain_file: str,
    transport: Transport,
    work: Sequence[Work],
    settings: DispatchSettings,
    **options: Any,
) -> DispatchReport:
    """``dispatch``, told of a draining stop by the driver's drain file (docs/operations.md,
    "Stopping siding"): the file appears when the drain begins."""
    if not drain_file:
        return await dispatch(transport, work, settings, **options)
    drain = asyncio.Event()
    watch = asyncio.create_task(watch_file(drain_file, drain))
    try:
        return await dispatch(transport, work, settings, drain=drain, **options)
    finally:
        watch.cancel()


async def watch_file(path: str, seen: asyncio.Event, poll_s: float = DRAIN_POLL_S) -> None:
    """Set ``seen`` once ``path`` exists (one stat per poll: cheap beside a dispatch)."""
    while not os.path.exists(path):
        await asyncio.sleep(poll_s)
    seen.set()


def flush_spans(timeout_s: float) -> None:
    """Export the process's ended spans before the task returns (bounded, best effort)."""
    from siding.tracing import otel

    otel.flush(timeout_s)


def deliver_partition(plan: TaskPlan) -> Any:
    """The function handed to ``RDD.mapPartitionsWithIndex``."""

    def run(partition_id: int, rows: Iterator[Sequence[Any]]) -> Iterator[TaskResult]:
        progress = begin(plan, partition_id)
        try:
            result = run_slice(plan, rows, partition_id, progress)
        except SidingError as exc:  # said in one line to the driver, which decides
            result = failed(exc)
        finally:
            progress.close()  # a failed task still records the ACKs it got
            if plan.tracing is not None:
                flush_spans(plan.tracing.flush_s)
        yield result

    return run
