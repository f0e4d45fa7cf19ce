"""Pure: what happens to a record, as one closed set of step types, and the records counted by step.

A record's way through a task ends in one ``Step``: finished (``Done``), moved to a retry lane
(``ToLane``), dead-lettered (``ToDlq``), its call outliving the batch (``Parked``, docs/parking.md),
waiting behind an earlier record of its key (``Held``, docs/dispatch.md), or written back as it
came because it is not due yet (``Resent``). ``siding.policy`` decides one attempt's ``Decision``
(which may also be ``Backoff`` or ``Stop``); the dispatch turns it into a ``FinalStep``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields

from siding.model import DeadClass, DeadKind, Output


@dataclass(frozen=True, slots=True)
class Done:
    """ACK: the record is finished once ``outputs`` (if any) are written (docs/outputs.md)."""

    outputs: tuple[Output, ...] = ()


@dataclass(frozen=True, slots=True)
class ToLane:
    """Send the record to retry lane ``lane`` for ``attempt``, due at ``not_before_ms``."""

    lane: int
    attempt: int
    not_before_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class ToDlq:
    """Write the record to the dead-letter queue. ``dead_class`` is the stable class of
    ``reason``, set where the reason is made; ``None`` only for a step rebuilt from a record
    written before siding kept it (``reason_class`` then reads the reason's text)."""

    reason: str
    dead_class: DeadClass | None = None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Deliver the same attempt again after ``delay_s``; the endpoint, not the record, failed."""

    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The endpoint is gone for good: stop the route and alert."""

    reason: str


@dataclass(frozen=True, slots=True)
class Parked:
    """The record's call was still running when its batch ended (docs/parking.md): it waits in
    the park topic under ``token`` until ``not_before_ms``. A suspect handed over to the park
    lane has ``deaths``, ``lone`` of them with no other suspect out (docs/dispatch.md,
    "Suspects")."""

    token: str
    not_before_ms: int
    deaths: int = 0
    lone: int = 0


@dataclass(frozen=True, slots=True)
class Held:
    """Key mode: the record waits behind an earlier record of its key: it goes to the route's
    hold topic unchanged and is read back by the main lane (docs/dispatch.md)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Resent:
    """A lane record read before it is due (a long Retry-After, or a retried record in key
    mode's hold topic): written back unchanged, due at ``not_before_ms``; not counted."""

    not_before_ms: int


Decision = Done | ToLane | ToDlq | Backoff | Stop
"""What one attempt's outcome calls for (``siding.policy.next_step``)."""

FinalStep = Done | ToLane | ToDlq | Parked | Held
"""Where a dispatch leaves a record at the end of its batch."""

Step = FinalStep | Resent
"""Everything a task writes a record for: the closed set ``route_out`` matches on."""


@dataclass(frozen=True, slots=True)
class StepCounts:
    """Records counted by their step, and the output records of the finished ones: what a task
    reports, a lane's metrics sum, and the devkit's runs total (``+`` adds them up)."""

    records: int = 0
    acked: int = 0
    to_lane: int = 0
    to_dlq: int = 0
    parked: int = 0
    held: int = 0
    # Output records produced for the finished records (docs/outputs.md).
    outputs: int = 0

    def __add__(self, other: StepCounts) -> StepCounts:
        return StepCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @classmethod
    def total(cls, counts: Iterable[StepCounts]) -> StepCounts:
        return sum(counts, cls())

    @classmethod
    def of(cls, steps: Iterable[Step]) -> StepCounts:
        """The counts of these steps; a ``Resent`` record is not settled, so not counted."""
        return cls.total(_count(step) for step in steps)


def _count(step: Step) -> StepCounts:
    match step:
        case Done(outputs=outputs):
            return StepCounts(records=1, acked=1, outputs=len(outputs))
        case ToLane():
            return StepCounts(records=1, to_lane=1)
        case ToDlq():
            return StepCounts(records=1, to_dlq=1)
        case Parked():
            return StepCounts(records=1, parked=1)
        case Held():
            return StepCounts(records=1, held=1)
        case Resent():
            return StepCounts()


# How a dead letter written before siding kept its class is classified: by the start of the
# reason texts siding wrote itself, then a transport status at its start.
_LEGACY_CLASSES = (
    ("the consumer died", DeadKind.CONSUMER_DIED),
    ("message too large", DeadKind.TOO_LARGE),
    ("http 413", DeadKind.TOO_LARGE),
    ("retries exhausted", DeadKind.RETRIES_EXHAUSTED),
    ("malformed", DeadKind.MALFORMED),
    ("record in a retry lane without", DeadKind.MALFORMED),
    ("record without", DeadKind.MALFORMED),
)
_STATUS = re.compile(r"(http \d{3}|grpc [A-Z_]+)\b")


def legacy_class(reason: str) -> DeadClass:
    """The class of a dead letter's ``reason`` from its text alone, as siding classified every
    reason before the class was kept with it (only for steps and letters without one)."""
    text = reason.strip()
    for start, kind in _LEGACY_CLASSES:
        if text.startswith(start):
            return DeadClass(kind)
    status = _STATUS.match(text)
    return DeadClass.of_status(status.group(1)) if status else DeadClass(DeadKind.CONSUMER)


def reason_class(reason: str, dead_class: DeadClass | None = None) -> str:
    """A dead letter's reason as a metric label from a bounded set: the class it carries
    (siding's own reasons by kind, a transport status such as ``http 422``, and the consumer's
    own text, which stays whole in the letter's headers, as ``consumer said dead``); for a
    letter written before classes were kept, the class of its text (``legacy_class``)."""
    return (dead_class or legacy_class(reason)).label
