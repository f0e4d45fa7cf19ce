"""What one Spark task reports to the driver: small counts, stats and key mode's wait events."""

from __future__ import annotations

from dataclasses import dataclass, field

from siding.dispatch import DispatchStats
from siding.dispatch.keyorder import WaitEvent
from siding.steps import StepCounts


@dataclass(frozen=True)
class TaskResult:
    """What the driver learns from one task (small: counts, stats, key mode's wait events)."""

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
