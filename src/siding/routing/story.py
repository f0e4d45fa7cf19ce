"""A record's story in Kafka headers: pure encode/decode, the same for lanes and the DLQ.

A lane or DLQ record carries the producer's headers first, unchanged, then the story: a block that
starts with ``siding.id`` and runs to the end, every header in it named ``siding.*``. Only that
trailing block is siding's, so a producer's own ``siding.*`` header is never taken for the story
nor dropped. A record of the source topic has no story: all its headers are the producer's.
Every story carries every field (empty when unset), so "the last header called X" is the story's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from siding.model import DeadClass, Headers, LaneHop

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
LONE_DEATHS = "siding.lone-deaths"
DEAD_CLASS = "siding.dead-class"


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
    # Of those, the deaths with no other suspect out (the park lane's conviction goes on).
    lone_deaths: int = 0
    # A dead letter's stable class; ``None`` elsewhere, and in letters written before it was kept.
    dead_class: DeadClass | None = None


def as_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """Every header as it came; a null header value becomes ``b""``."""
    return tuple((name, value if value is not None else b"") for name, value in (headers or ()))


def story_start(names: Sequence[str]) -> int:
    """Where the story block begins in ``names`` (``len(names)`` when there is none): at the
    last ``siding.id`` when every name from there to the end is ``siding.*``."""
    start = len(names)
    for index in range(len(names) - 1, -1, -1):
        if not names[index].startswith(PREFIX):
            break
        if names[index] == ID:
            start = index
            break
    return start


def split(
    headers: Iterable[tuple[str, bytes | None]] | None,
) -> tuple[Headers, Headers]:
    """``(producer's headers, story block)`` of a record siding may have written."""
    items = as_headers(headers)
    start = story_start([name for name, _ in items])
    return items[:start], items[start:]


def user_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """The producer's own headers of a lane or DLQ record: everything before the story block."""
    return split(headers)[0]


def sql_field(name: str) -> str:
    """Spark SQL text for story field ``name`` of a record's ``headers`` column, as a string
    (NULL when absent): the last header so called, which is the story's when there is one."""
    return f"cast(try_element_at(filter(headers, h -> h.key = '{name}'), -1).value as string)"


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
        (DIED_AT, str(story.died_at_ms) if story.died_at_ms is not None else ""),
        (ROUTE, story.route),
        (PARK_TOKEN, story.park_token),
        (DEATHS, str(story.deaths)),
        (LONE_DEATHS, str(story.lone_deaths)),
        (DEAD_CLASS, story.dead_class.label if story.dead_class is not None else ""),
    ]
    return tuple((name, value.encode()) for name, value in fields)


def decode(headers: Iterable[tuple[str, bytes | None]] | None) -> StoryHeaders | None:
    """The story carried by a lane or DLQ record; ``None`` for a record without one. Stories
    written before every field was always present decode the same (missing means unset)."""
    block = split(headers)[1]
    if not block:
        return None
    own = {name: value.decode("utf-8", "replace") for name, value in block}
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
        lone_deaths=int(own.get(LONE_DEATHS) or 0),
        dead_class=DeadClass.from_label(own.get(DEAD_CLASS, "")),
    )
