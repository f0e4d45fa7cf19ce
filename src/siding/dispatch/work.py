"""What goes into a dispatch and what comes out of it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from siding.dispatch.stats import DispatchStats
from siding.model import Delivery, LaneHop, Outcome
from siding.steps import Done, Held, Parked, Step, ToDlq, ToLane


@dataclass(frozen=True, slots=True)
class Work:
    """One record to deliver, not before ``not_before_ms`` (epoch milliseconds); ``deaths``: the
    consumer already went away this many times with it in flight (a suspect from the start),
    ``lone`` of them with no other suspect out;
    ``deadline_s`` overrides the slice's deadline for it (key mode: a retried record in the main
    lane's loop keeps its lane's deadline); ``hops`` are the lanes it passed inside this dispatch
    (key mode: a record retried in the batch that failed it, ``siding.dispatch.inbatch``), after
    those of its story."""

    delivery: Delivery
    not_before_ms: int = 0
    deaths: int = 0
    deadline_s: float | None = None
    # Of ``deaths``, those with no other suspect out, carried with their evidence
    # (``Suspects.carried_lone``).
    lone: int = 0
    hops: tuple[LaneHop, ...] = ()


@dataclass(frozen=True, slots=True)
class Settled:
    """``work``'s step: a dispatch's ``FinalStep``, or ``Resent`` for one a task writes back."""

    work: Work
    step: Step


@dataclass(frozen=True, slots=True)
class ParkedCall:
    """A call the window handed over still running: whoever adopts it settles ``token``."""

    work: Work
    token: str
    task: asyncio.Task[tuple[Outcome, float]]


@dataclass(frozen=True, slots=True)
class DispatchReport:
    """Every input item exactly once, in input order, with its final step; ``parked`` holds the
    running calls of the items whose step is ``Parked``. An item retried inside the dispatch
    (key mode, ``siding.dispatch.inbatch``) comes back as the ``Work`` of its retry: its
    attempt, lane and hops are those its step is about."""

    settled: tuple[Settled, ...]
    stats: DispatchStats
    parked: tuple[ParkedCall, ...] = ()

    def of(self, kind: type[Step]) -> tuple[Settled, ...]:
        """The items whose step is a ``kind``."""
        return tuple(s for s in self.settled if isinstance(s.step, kind))

    @property
    def done(self) -> tuple[Settled, ...]:
        return self.of(Done)

    @property
    def to_lane(self) -> tuple[Settled, ...]:
        return self.of(ToLane)

    @property
    def parked_items(self) -> tuple[Settled, ...]:
        return self.of(Parked)

    @property
    def held(self) -> tuple[Settled, ...]:
        return self.of(Held)

    @property
    def to_dlq(self) -> tuple[Settled, ...]:
        return self.of(ToDlq)
