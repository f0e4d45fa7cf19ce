"""Pure: Spark rows of the Kafka source -> deliveries, for the main lane and for retry lanes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from siding.model import DeadClass, DeadKind, Delivery, LaneHop, delivery_id
from siding.routing import story
from siding.steps import ToDlq

# Columns every lane's batch is reduced to before it is shipped to the tasks. Each is of a type
# pyspark hands over as it was unpickled (strings, numbers, bytes, arrays of them): a column that
# needs converting (a struct, a timestamp) makes pyspark rebuild every row field by field, and
# the headers' array of structs cost a Row per header. So a header travels as [key, value],
# its key UTF-8 bytes (Kafka's header keys are strings), and the timestamp as epoch millis.
COLUMNS = ("topic", "partition", "offset", "key", "value", "headers", "ts_ms")
SELECT_EXPR = (
    "topic",
    "partition",
    "offset",
    "key",
    "value",
    "transform(headers, h -> array(encode(h.key, 'UTF-8'), h.value)) AS headers",
    "unix_millis(timestamp) AS ts_ms",
)
_MALFORMED = DeadClass(DeadKind.MALFORMED)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A delivery read from a lane, with what its story carried, or why it cannot be delivered."""

    delivery: Delivery
    not_before_ms: int = 0
    hops: tuple[LaneHop, ...] = ()
    malformed: str = ""
    park_token: str = ""
    deaths: int = 0
    lone: int = 0
    # The class of ``malformed``: a garbled story, or a record too large to send.
    dead_class: DeadClass = _MALFORMED

    @property
    def dead_letter(self) -> ToDlq:
        """The step of an item that cannot be delivered (``malformed`` says why)."""
        return ToDlq(self.malformed, self.dead_class)


def _name(key: Any) -> str:
    return key.decode() if isinstance(key, bytes | bytearray) else str(key)


def _headers(raw: Sequence[Any] | None) -> list[tuple[str, bytes | None]]:
    """A row's headers, each ``[key bytes, value]`` (``SELECT_EXPR``) or ``(key, value)``."""
    if not raw:
        return []
    return [(_name(key), bytes(value) if value is not None else None) for key, value in raw]


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def main_lane_delivery(row: Sequence[Any]) -> Incoming:
    """A record of the source topic: attempt 1 in lane 0. It has no story, so every header is
    the producer's and is delivered as it is, ``siding.*`` names included."""
    topic, partition, offset, key, value, headers, ts_ms = row
    return Incoming(
        Delivery(
            id=delivery_id(topic, partition, offset),
            topic=topic,
            partition=int(partition),
            offset=int(offset),
            key=_bytes(key),
            value=_bytes(value),
            headers=story.as_headers(_headers(headers)),
            timestamp_ms=int(ts_ms or 0),
        )
    )


def retry_lane_delivery(row: Sequence[Any]) -> Incoming:
    """A record of a retry lane: the original identity and story come from its headers."""
    _, _, _, key, value, headers, _ = row
    raw_headers = _headers(headers)
    try:
        told = story.decode(raw_headers)
    except (ValueError, KeyError, TypeError) as exc:
        told, problem = None, f"malformed siding headers: {exc}"
    else:
        problem = "" if told is not None else "record in a retry lane without siding headers"
    if told is None:
        # Keep the lane record's own identity so the dead letter can be found and explained.
        fallback = main_lane_delivery(row).delivery
        return Incoming(fallback, malformed=problem)
    origin = told.origin
    return Incoming(
        Delivery(
            id=origin.delivery_id,
            topic=origin.topic,
            partition=origin.partition,
            offset=origin.offset,
            key=_bytes(key),
            value=_bytes(value),
            headers=story.user_headers(raw_headers),
            timestamp_ms=origin.timestamp_ms,
            attempt=told.attempt,
            lane=told.lane,
        ),
        not_before_ms=told.not_before_ms,
        hops=told.hops,
        park_token=told.park_token,
        deaths=told.deaths,
        lone=told.lone_deaths,
    )


# Field tags, lengths and the id/topic strings of a Delivery message, beyond its payload.
_ENVELOPE_BYTES = 1024


def wire_size(delivery: Delivery) -> int:
    """About what ``delivery`` takes on the wire (never less): payload, key, headers, envelope."""
    headers = sum(len(name) + len(value) + 8 for name, value in delivery.headers)
    key = len(delivery.key or b"")
    return len(delivery.value or b"") + key + headers + len(delivery.id) * 2 + _ENVELOPE_BYTES


def too_large(item: Incoming, limit: int) -> str:
    """Why ``item`` cannot be delivered for its size ("" when it can, or ``limit`` is 0)."""
    size = wire_size(item.delivery)
    if not limit or size <= limit:
        return ""
    return (
        f"message too large: {size} bytes is more than max_message_bytes={limit}"
        " (the consumer's transport would refuse it)"
    )


def incoming(rows: Iterable[Sequence[Any]], lane: int, hold_topic: str = "") -> list[Incoming]:
    """Deliveries of a lane's rows. The main lane also reads ``hold_topic`` (key mode), whose
    records carry their story like a retry lane's: held ones keep their lane (usually 0) and
    are due at once, retried ones wait out their lane's delay there."""
    if lane != 0:
        return [retry_lane_delivery(row) for row in rows]
    if not hold_topic:  # unordered: no row is held (and a Row's [0] is a Python-level call)
        return [main_lane_delivery(row) for row in rows]
    return [
        retry_lane_delivery(row) if row[0] == hold_topic else main_lane_delivery(row)
        for row in rows
    ]
