"""A record's story in Kafka headers: pure encode/decode, the same for lanes and the DLQ.

siding's own headers all start with ``siding.``; every other header is the producer's and is passed
through untouched (and shown to consumers without siding's own).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from siding.model import Headers, LaneHop

PREFIX = "siding."
ID = "siding.id"
TOPIC = "siding.topic"
PARTITION = "siding.partition"
OFFSET = "siding.offset"
TIMESTAMP = "siding.timestamp"
ATTEMPT = "siding.attempt"
LANE = "siding.lane"
NOT_BEFORE = "siding.not-before"
HOPS = "siding.hops"
REASON = "siding.reason"
DIED_AT = "siding.died-at"
ROUTE = "siding.route"
PARK_TOKEN = "siding.park-token"
DEATHS = "siding.deaths"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a record was first read; its identity for life."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    @property
    def delivery_id(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


@dataclass(frozen=True, slots=True)
class StoryHeaders:
    """Everything siding keeps about a record between lanes and into the DLQ."""

    origin: Origin
    attempt: int
    lane: int
    not_before_ms: int
    hops: tuple[LaneHop, ...]
    reason: str = ""
    died_at_ms: int | None = None
    route: str = ""
    # Set on a parked record: the call it stands for may still settle it (docs/parking.md).
    park_token: str = ""
    # A suspect's deaths so far: the consumer went away this many times with it out.
    deaths: int = 0


def user_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """The producer's own headers, without siding's; a null header value becomes ``b""``."""
    return tuple(
        (name, value if value is not None else b"")
        for name, value in (headers or ())
        if not name.startswith(PREFIX)
    )


def _hop_json(hop: LaneHop) -> dict[str, object]:
    return {"lane": hop.lane, "attempt": hop.attempt, "at": hop.at_ms, "reason": hop.reason}


def encode(story: StoryHeaders) -> Headers:
    origin = story.origin
    fields: list[tuple[str, str]] = [
        (ID, origin.delivery_id),
        (TOPIC, origin.topic),
        (PARTITION, str(origin.partition)),
        (OFFSET, str(origin.offset)),
        (TIMESTAMP, str(origin.timestamp_ms)),
        (ATTEMPT, str(story.attempt)),
        (LANE, str(story.lane)),
        (NOT_BEFORE, str(story.not_before_ms)),
        (HOPS, json.dumps([_hop_json(h) for h in story.hops], separators=(",", ":"))),
        (REASON, story.reason),
    ]
    if story.died_at_ms is not None:
        fields.append((DIED_AT, str(story.died_at_ms)))
    if story.route:
        fields.append((ROUTE, story.route))
    if story.park_token:
        fields.append((PARK_TOKEN, story.park_token))
    if story.deaths:
        fields.append((DEATHS, str(story.deaths)))
    return tuple((name, value.encode()) for name, value in fields)


def decode(headers: Iterable[tuple[str, bytes | None]] | None) -> StoryHeaders | None:
    """The story carried by a lane or DLQ record; ``None`` for a record without one."""
    own = {
        name: (value or b"").decode("utf-8", "replace")
        for name, value in (headers or ())
        if name.startswith(PREFIX)
    }
    if ID not in own:
        return None
    hops = tuple(
        LaneHop(int(h["lane"]), int(h["attempt"]), int(h["at"]), str(h["reason"]))
        for h in json.loads(own.get(HOPS) or "[]")
    )
    died = own.get(DIED_AT)
    return StoryHeaders(
        origin=Origin(
            topic=own[TOPIC],
            partition=int(own[PARTITION]),
            offset=int(own[OFFSET]),
            timestamp_ms=int(own.get(TIMESTAMP) or 0),
        ),
        attempt=int(own.get(ATTEMPT) or 1),
        lane=int(own.get(LANE) or 0),
        not_before_ms=int(own.get(NOT_BEFORE) or 0),
        hops=hops,
        reason=own.get(REASON, ""),
        died_at_ms=int(died) if died else None,
        route=own.get(ROUTE, ""),
        park_token=own.get(PARK_TOKEN, ""),
        deaths=int(own.get(DEATHS) or 0),
    )
