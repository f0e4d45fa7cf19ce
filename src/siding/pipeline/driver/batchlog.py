"""What the driver logs after each batch: one summary line per route and lane, and every breaker
transition the batch's tasks saw (docs/operations.md, "Logs")."""

from __future__ import annotations

import logging
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
        return (
            f"route {route}: circuit breaker {t.before.value} -> {t.after.value}"
            f" (executor {self.host} pid {self.pid})"
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
        }
        log.log(level, change.message(route), extra={"siding": fields})
