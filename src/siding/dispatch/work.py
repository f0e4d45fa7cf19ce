"""What goes into a dispatch and what comes out of it."""

from __future__ import annotations

from dataclasses import dataclass

from siding.dispatch.stats import DispatchStats
from siding.model import Delivery
from siding.policy import Done, ToDlq, ToLane

FinalStep = Done | ToLane | ToDlq


@dataclass(frozen=True, slots=True)
class Work:
    """One record to deliver, not before ``not_before_ms`` (epoch milliseconds)."""

    delivery: Delivery
    not_before_ms: int = 0


@dataclass(frozen=True, slots=True)
class Settled:
    work: Work
    step: FinalStep


@dataclass(frozen=True, slots=True)
class DispatchReport:
    """Every input item exactly once, in input order, with its final step."""

    settled: tuple[Settled, ...]
    stats: DispatchStats

    @property
    def done(self) -> tuple[Settled, ...]:
        return tuple(s for s in self.settled if isinstance(s.step, Done))

    @property
    def to_lane(self) -> tuple[Settled, ...]:
        return tuple(s for s in self.settled if isinstance(s.step, ToLane))

    @property
    def to_dlq(self) -> tuple[Settled, ...]:
        return tuple(s for s in self.settled if isinstance(s.step, ToDlq))
