"""What the driver logs after each batch: one summary line per route and lane, and every breaker
transition the batch's tasks saw (docs/operations.md, "Logs")."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from siding import naming
from siding.dispatch import BreakerState, BreakerTransition
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts

log = logging.getLogger("siding.batches")


@dataclass(frozen=True, slots=True)
class BatchSummary:
    route: str
    lane: str
    counts: StepCounts
    seconds: float

    def message(self) -> str:
        c = self.counts
        return (
            f"route {self.route} {self.lane}: {c.records} records in {self.seconds:.3f}s"
            f" (acked {c.acked}, to lanes {c.to_lane}, dead {c.to_dlq},"
            f" parked {c.parked}, held {c.held})"
        )

    def fields(self) -> dict[str, object]:
        """The same as structured fields (``--log-format json``)."""
        return {
            "event": "batch",
            "route": self.route,
            "lane": self.lane,
            "records": self.counts.records,
            "acked": self.counts.acked,
            "to_lane": self.counts.to_lane,
            "dead": self.counts.to_dlq,
            "parked": self.counts.parked,
            "held": self.counts.held,
            "seconds": round(self.seconds, 3),
        }


def summarise(route: str, lane: int, results: Iterable[TaskResult], seconds: float) -> BatchSummary:
    """Pure: one batch's task results, summed."""
    counts = StepCounts.total(r.counts for r in results)
    return BatchSummary(route, naming.lane_label(lane), counts, seconds)


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """A breaker transition in one executor process (each process has its own breaker)."""

    host: str
    pid: int
    transition: BreakerTransition

    def message(self, route: str) -> str:
        t = self.transition
        why = ""
        if t.after is BreakerState.OPEN:
            why = f", for {t.open_for_s:g}s" + (" after a death" if t.death else "")
        return (
            f"route {route}: circuit breaker {t.before.value} -> {t.after.value}"
            f" (executor {self.host} pid {self.pid}, at {clock_time(t.wall)}{why})"
        )


def clock_time(epoch_s: float) -> str:
    """Pure: the local time of day to the millisecond, as the log's own timestamps say it (a
    transition is logged when its batch ends, which may be many seconds later)."""
    return time.strftime("%H:%M:%S", time.localtime(epoch_s)) + f".{int(epoch_s * 1000) % 1000:03d}"


def task_line(route: str, lane: str, result: TaskResult) -> str:
    """Pure: what one task of a batch did, for the DEBUG log: its worker process, its records,
    its sends, its window's limit when it ended (the adaptive one: a limit that stays low after
    an outage shows here), how long it waited for its breaker, and its suspects
    (docs/operations.md)."""
    c, st = result.counts, result.stats
    line = (
        f"route {route} {lane} task (executor {result.host} pid {result.pid}): {c.records}"
        f" records (acked {c.acked}, to lanes {c.to_lane}, dead {c.to_dlq}, parked {c.parked})"
    )
    if st is None:
        return line
    return (
        f"{line}; {st.sends} sends, max {st.max_in_flight} in flight (limit {st.final_limit}"
        f" at the end), breaker wait"
        f" {st.breaker_wait_s:.1f}s, suspects {st.suspected} (isolations {st.isolations},"
        f" convicted {st.convicted}, handed over {st.handed_over})"
    )


def breaker_changes(results: Iterable[TaskResult]) -> list[BreakerChange]:
    """Pure: every transition the tasks saw, once each (tasks of one process share a breaker,
    so they may report the same transition), oldest first per process."""
    seen: dict[tuple[str, int, float, BreakerState, BreakerState], BreakerChange] = {}
    for r in results:
        for t in r.stats.breaker_transitions if r.stats is not None else ():
            seen.setdefault(
                (r.host, r.pid, t.at, t.before, t.after), BreakerChange(r.host, r.pid, t)
            )
    return sorted(seen.values(), key=lambda c: (c.host, c.pid, c.transition.at))


def log_batch(route: str, lane: int, results: list[TaskResult], seconds: float) -> None:
    """Log the batch summary at INFO and each breaker transition (opening at WARNING)."""
    summary = summarise(route, lane, results, seconds)
    log.info(summary.message(), extra={"siding": summary.fields()})
    if log.isEnabledFor(logging.DEBUG):
        for result in results:
            if result.counts.records:
                log.debug(task_line(route, summary.lane, result))
    for change in breaker_changes(results):
        level = logging.WARNING if change.transition.after is BreakerState.OPEN else logging.INFO
        fields = {
            "event": "breaker",
            "route": route,
            "lane": summary.lane,
            "before": change.transition.before.value,
            "after": change.transition.after.value,
            "host": change.host,
            "pid": change.pid,
            "at": round(change.transition.wall, 3),
        }
        log.log(level, change.message(route), extra={"siding": fields})
