"""One Spark task of a route's park lane: finish parked records from their calls' answers.

For each parked record (docs/parking.md):
- its call answered (a settlement exists): the answer decides, as if the batch had waited for it:
  done, next retry lane, or the DLQ; the consumer is not asked again;
- no answer and it is due (the worker died, or the settlement could not be written), or the
  consumer went away with the call (a suspect, with that death counted): it is delivered again,
  in its own lane's deadline, and the answer decides;
- no answer yet and not due: it goes back into the park topic unchanged.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from siding.dispatch import Settled, Work
from siding.dispatch.trace import SuspectTrace
from siding.errors import SidingError
from siding.pipeline.executor import fence_gate
from siding.pipeline.executor.plan import TaskPlan, dispatch_settings, share_among_executors
from siding.pipeline.executor.result import TaskResult
from siding.pipeline.executor.rows import Incoming, incoming
from siding.pipeline.executor.task import (
    dead_reasons,
    deliver,
    failed,
    flush_spans,
    is_dead,
    split_letters,
    suspect_trace,
    tally,
    task_trace,
    topic_of,
)
from siding.pipeline.executor.worker import runtime
from siding.policy import next_step
from siding.routing.settlement import Settlement
from siding.steps import Backoff, Done, Parked, StepCounts, Stop, ToDlq, ToLane


def sort_parked(
    plan: TaskPlan, items: Sequence[Incoming], settlements: Mapping[str, Settlement], now_ms: int
) -> tuple[list[Settled], dict[int, list[Work]], list[Incoming]]:
    """Pure: (finished from an answer, to deliver again by lane, not due yet)."""
    finished: list[Settled] = []
    again: dict[int, list[Work]] = {}
    later: list[Incoming] = []
    lanes = plan.settings.lanes
    for item in items:
        delivery = item.delivery
        if item.malformed:
            finished.append(Settled(Work(delivery), item.dead_letter))
            continue
        settlement = settlements.get(item.park_token)
        deaths = item.deaths
        if settlement is not None:
            deaths += int(settlement.outcome.lost)
            step = next_step(
                settlement.outcome,
                delivery.attempt,
                lanes,
                now_ms,
                max_retry_after_s=plan.route.max_retry_after,
            )
            match step:
                case Done() | ToLane() | ToDlq():
                    finished.append(Settled(Work(delivery), step))
                    continue
                case Backoff() | Stop():
                    pass  # the parked call's endpoint was down or gone: ask again, here
        elif item.not_before_ms > now_ms:
            later.append(item)
            continue
        again.setdefault(delivery.lane, []).append(Work(delivery, deaths=deaths, lone=item.lone))
    return finished, again, later


def trace_settled(
    trace: SuspectTrace, items: Sequence[Incoming], settlements: Mapping[str, Settlement]
) -> None:
    """A trace line for each parked record whose call the consumer went away with (a death
    counted here, from its settlement) and each that arrives a suspect."""
    for item in items:
        settlement = settlements.get(item.park_token)
        lost = settlement is not None and settlement.outcome.lost
        if lost or item.deaths:
            trace(
                "parked-lost" if lost else "parked",
                item.delivery.id,
                deaths=f"{item.deaths}->{item.deaths + int(lost)}" if lost else item.deaths,
                lone=item.lone,
                answered=settlement is not None,
            )


def run_park_slice(plan: TaskPlan, rows: Iterable[Sequence[Any]], partition_id: int) -> TaskResult:
    items = incoming(rows, lane=1)  # parked records carry their story, like lane records
    if not items:
        return TaskResult(pid=os.getpid(), host=socket.gethostname())
    finished, again, later = sort_parked(plan, items, plan.settlements, int(time.time() * 1000))
    trace_settled(suspect_trace(plan, partition_id), items, plan.settlements)
    settled = list(finished)
    stats = None
    trace = task_trace(plan)
    watch = None if trace is None else trace.wrap
    for lane, group in sorted(again.items()):
        own = min(lane, len(plan.route.lanes))  # the lanes may have been shortened since
        settings = share_among_executors(
            dispatch_settings(plan.route, own, park=False), plan.executors
        )
        report = deliver(plan, settings, group, partition_id, watch=watch)
        settled += report.settled
        stats = report.stats
    hops = {i.delivery.id: i.hops for i in items if i.hops}
    # Not due yet: parked again as it was, under its call's token (not counted: not settled).
    again_parked = [
        Settled(Work(i.delivery), Parked(i.park_token, i.not_before_ms, i.deaths, i.lone))
        for i in later
    ]
    out, letters = split_letters(plan, [*settled, *again_parked], hops, int(time.time() * 1000))
    if out:
        fence_gate.check(plan.fence, plan.client_conf)
        started_ns = time.time_ns()
        runtime().producer(plan.client_conf).write(out)
        if trace is not None:
            kept = [s for s in settled if not is_dead(s)]
            trace.wrote(kept, lambda d, step: topic_of(plan, d, step), started_ns, time.time_ns())
    used = tuple(i.park_token for i in items if i.park_token in plan.settlements)
    result = tally(
        settled,
        stats=stats,
        used_tokens=used,
        dead_reasons=dead_reasons(settled),
        letters=tuple(letters),
        spans_dropped=trace.dropped() if trace is not None else 0,
    )
    # A parked call's outputs were written by the worker before its settlement: counted here,
    # when the park lane finishes the record (docs/outputs.md).
    written = StepCounts(outputs=sum(plan.settlements[token].outputs for token in used))
    return replace(result, counts=result.counts + written)


def settle_partition(plan: TaskPlan) -> Any:
    """The function handed to ``RDD.mapPartitionsWithIndex`` for the park lane."""

    def run(partition_id: int, rows: Iterable[Sequence[Any]]) -> Iterable[TaskResult]:
        try:
            result = run_park_slice(plan, rows, partition_id)
        except SidingError as exc:  # said in one line to the driver, which decides
            result = failed(exc)
        finally:
            if plan.tracing is not None:
                flush_spans(plan.tracing.flush_s)
        yield result

    return run
