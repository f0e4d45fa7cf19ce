"""Frozen value types shared by every layer: what is delivered, what comes back, where it goes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

# The contract's value types are the consumer SDK's (siding_consumer.model), so a Delivery is
# the same class on both sides of the wire.
from siding_consumer.model import Delivery, Headers, Output, Verdict

__all__ = [
    "ACK",
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


@dataclass(frozen=True, slots=True)
class Outcome:
    """``no_answer``: the endpoint said nothing within the deadline (a timeout). ``lost``: the
    connection broke after the delivery went out (a BACKOFF): the consumer may have died on this
    very message, so the dispatcher treats it as a suspect (docs/dispatch.md, "Suspects").
    ``outputs``: the records an ACK asks siding to produce before the input is done."""

    kind: OutcomeKind
    reason: str = ""
    retry_after_s: float | None = None
    no_answer: bool = False
    lost: bool = False
    outputs: tuple[Output, ...] = ()

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
