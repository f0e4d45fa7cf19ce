"""What the driver logs after each batch: one summary line per route and lane, and every breaker
transition the batch's tasks saw (docs/operations.md, "Logs")."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from siding import naming
from siding.dispatch import BreakerState, BreakerTransition
from siding.pipeline.executor.result import TaskResult

log = logging.getLogger("siding.batches")


@dataclass(frozen=True, slots=True)
class BatchSummary:
    route: str
    lane: str
    records: int
    acked: int
    to_lane: int
    to_dlq: int
    parked: int
    held: int
    seconds: float

    def message(self) -> str:
        return (
            f"route {self.route} {self.lane}: {self.records} records in {self.seconds:.3f}s"
            f" (acked {self.acked}, to lanes {self.to_lane}, dead {self.to_dlq},"
            f" parked {self.parked}, held {self.held})"
        )

    def fields(self) -> dict[str, object]:
        """The same as structured fields (``--log-format json``)."""
        return {
            "event": "batch",
            "route": self.route,
            "lane": self.lane,
            "records": self.records,
            "acked": self.acked,
            "to_lane": self.to_lane,
            "dead": self.to_dlq,
            "parked": self.parked,
            "held": self.held,
            "seconds": round(self.seconds, 3),
        }


def summarise(route: str, lane: int, results: Iterable[TaskResult], seconds: float) -> BatchSummary:
    """Pure: one batch's task results, summed."""
    results = list(results)
    return BatchSummary(
        route=route,
        lane=naming.lane_label(lane),
        records=sum(r.records for r in results),
        acked=sum(r.acked for r in results),
        to_lane=sum(r.to_lane for r in results),
        to_dlq=sum(r.to_dlq for r in results),
        parked=sum(r.parked for r in results),
        held=sum(r.held for r in results),
        seconds=seconds,
    )


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
