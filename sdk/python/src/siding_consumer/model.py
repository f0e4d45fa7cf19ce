"""The contract's value types, shared by consumer services and the proxy: what is delivered and
what a consumer may ask siding to produce."""

from __future__ import annotations

import enum
from dataclasses import dataclass

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message pushed to a consumer service.

    ``topic``/``partition``/``offset`` name the *original* record (so ``id`` is stable), even when
    the delivery comes from a retry lane or a DLQ replay. ``attempt`` starts at 1; ``lane`` is 0 for
    the main lane and k for retry lane k. ``key`` and ``value`` are ``None`` when the record has
    none (a tombstone has no value), unlike present-but-empty.
    """

    id: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int = 0
    attempt: int = 1
    lane: int = 0


class Verdict(enum.Enum):
    """What a consumer service answered for one delivery."""

    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Output:
    """A record a consumer asks siding to write to Kafka before its delivery counts as done
    (consume-and-produce; the topic must be one of the route's ``outputs``)."""

    topic: str
    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = ()
