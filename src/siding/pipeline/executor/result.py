"""What one Spark task reports to the driver: counts, stats, key mode's wait events, and its
dead letters (the driver writes them once the whole batch passed the DLQ-flood guard)."""

from __future__ import annotations

from dataclasses import dataclass, field

from siding.dispatch import DispatchStats
from siding.dispatch.keyorder import WaitEvent
from siding.routing.producer import OutRecord
from siding.steps import StepCounts


@dataclass(frozen=True)
class TaskResult:
    """What the driver learns from one task (counts, stats, key mode's wait events, letters)."""

    counts: StepCounts = field(default_factory=StepCounts)
    stats: DispatchStats | None = None
    wait_events: tuple[WaitEvent, ...] = ()
    dead_reasons: dict[str, int] = field(default_factory=dict)
    pid: int = 0
    host: str = ""
    # The park lane: settlements this task used up (the driver forgets them).
    used_tokens: tuple[str, ...] = ()
    # (token, not-before ms) of the calls this task parked still running: a draining stop waits
    # for their settlements (siding.pipeline.driver.drain).
    running_parked: tuple[tuple[str, int], ...] = ()
    # A replayed batch: records left out because an earlier attempt made them durable.
    skipped: int = 0
    # The DLQ records of the slice, not yet written: the driver judges the batch's share of
    # DEAD first (siding.pipeline.driver.flood), then writes them or stops the route.
    letters: tuple[OutRecord, ...] = ()
    # A task that could not finish its slice says why in one line instead of failing the Spark
    # task (which would print Java and Python traces); the driver runs the batch again or, when
    # ``retriable`` is false, stops the route with this line.
    failure: str = ""
    retriable: bool = True
    # Spans this worker failed to export since its last task said so ([tracing]; best effort).
    spans_dropped: int = 0
