"""Frozen value types shared by every layer: what is delivered, what comes back, where it goes."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

# The contract's value types are the consumer SDK's (siding_consumer.model), so a Delivery is
# the same class on both sides of the wire.
from siding_consumer.model import Delivery, Headers, Output, Verdict

__all__ = [
    "ACK",
    "DeadClass",
    "DeadKind",
    "Delivery",
    "Headers",
    "Lane",
    "LaneHop",
    "Ordering",
    "Outcome",
    "OutcomeKind",
    "Output",
    "Result",
    "Story",
    "Verdict",
    "delivery_id",
]


def delivery_id(topic: str, partition: int, offset: int) -> str:
    """The stable id of a record: the same across retries, lanes and DLQ replays."""
    return f"{topic}/{partition}/{offset}"


@dataclass(frozen=True, slots=True)
class Result:
    """A consumer's answer: ACK, RETRY (optionally after some seconds) or DEAD with a reason;
    an ACK may carry ``outputs`` for siding to produce first (docs/outputs.md)."""

    delivery_id: str
    verdict: Verdict
    retry_after_s: float | None = None
    reason: str = ""
    outputs: tuple[Output, ...] = ()


class OutcomeKind(enum.Enum):
    """A transport's answer mapped to what siding does next.

    ACK      done.
    RETRY    try again later, in the next retry lane (consumer said retry, timed out, 5xx).
    DEAD     a poison pill: straight to the DLQ.
    BACKOFF  the endpoint is down or overloaded: redeliver in place after a pause, feed the
             circuit breaker, do not spend an attempt (a consumer that is down is not a
             poison pill).
    GONE     the endpoint is gone for good (HTTP 410): stop the route and alert.
    """

    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"
    BACKOFF = "backoff"
    GONE = "gone"


class DeadKind(enum.Enum):
    """Why a record was dead-lettered: its value is the metric label (docs/operations.md)."""

    CONSUMER = "consumer said dead"  # the consumer's own answer, whatever its text
    STATUS = "status"  # a transport status said so; the label is the status itself
    TOO_LARGE = "too large"
    RETRIES_EXHAUSTED = "retries exhausted"
    CONSUMER_DIED = "consumer died"  # a crash pill (docs/dispatch.md, "Suspects")
    MALFORMED = "malformed"


_STATUS_LABEL = re.compile(r"(http \d{3}|grpc [A-Z_]+)")


@dataclass(frozen=True, slots=True)
class DeadClass:
    """A dead letter's stable class, set where its reason is made and written with the letter
    (``siding.dead-class``, docs/headers.md): a bounded label, whatever the reason's text."""

    kind: DeadKind
    status: str = ""  # DeadKind.STATUS only: "http 422", "grpc INVALID_ARGUMENT"

    @classmethod
    def of_status(cls, status: str) -> DeadClass:
        return cls(DeadKind.STATUS, status)

    @property
    def label(self) -> str:
        return self.status if self.kind is DeadKind.STATUS else self.kind.value

    @classmethod
    def from_label(cls, label: str) -> DeadClass | None:
        """The class a ``label`` names; ``None`` for an empty or unknown one."""
        if _STATUS_LABEL.fullmatch(label):
            return cls.of_status(label)
        kind = next((k for k in DeadKind if k.value == label and k is not DeadKind.STATUS), None)
        return cls(kind) if kind is not None else None


@dataclass(frozen=True, slots=True)
class Outcome:
    """``no_answer``: the endpoint said nothing within the deadline (a timeout). ``lost``: the
    connection broke after the delivery went out (a BACKOFF): the consumer may have died on this
    very message, so the dispatcher treats it as a suspect (docs/dispatch.md, "Suspects").
    ``outputs``: the records an ACK asks siding to produce before the input is done.
    ``dead_class``: a DEAD outcome's stable class, set by the transport that read the answer."""

    kind: OutcomeKind
    reason: str = ""
    retry_after_s: float | None = None
    no_answer: bool = False
    lost: bool = False
    outputs: tuple[Output, ...] = ()
    dead_class: DeadClass | None = None

    @property
    def is_failure_signal(self) -> bool:
        """Whether this outcome should cut the adaptive concurrency limit."""
        return self.kind in (OutcomeKind.RETRY, OutcomeKind.BACKOFF)


ACK = Outcome(OutcomeKind.ACK)


class Ordering(enum.Enum):
    UNORDERED = "unordered"
    KEY = "key"


@dataclass(frozen=True, slots=True)
class Lane:
    """A retry lane: records wait at least ``delay_s`` before each attempt, which may last
    ``deadline_s``; ``attempts`` deliveries are made in this lane before moving on."""

    delay_s: float
    deadline_s: float
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class LaneHop:
    """One entry of a record's story: it left ``lane`` after ``attempt`` because of ``reason``."""

    lane: int
    attempt: int
    at_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Story:
    """What a record carries between lanes and into the DLQ (invariant 6)."""

    attempt: int = 1
    lane: int = 0
    not_before_ms: int = 0
    hops: tuple[LaneHop, ...] = field(default=())
