"""Pure: the record that replays a dead letter (into retry lane 1, or back onto the source topic)
and how fast replays may go."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from siding import naming
from siding.config import RouteConfig
from siding.dispatch.keyorder import first_attempt_of_lane
from siding.dlq.fate import LetterRef
from siding.errors import DlqError
from siding.model import Delivery, Headers
from siding.routing import story
from siding.routing.producer import OutRecord
from siding.routing.records import lane_record
from siding.steps import ToLane

REPLAY_OF = "siding-replay-of"
REPLAY_REASON = "replayed from DLQ"
MAX_CHUNK = 500


class Target(enum.Enum):
    LANE1 = "lane1"
    ORIGIN = "origin"


@dataclass(frozen=True, slots=True)
class Letter:
    """A dead letter as read from the DLQ, with its raw headers (story and user's)."""

    ref: LetterRef
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


def resolve_target(requested: str | None, route: RouteConfig) -> Target:
    """``--to``: lane 1 by default. A route without lanes needs ``--to origin`` said out loud,
    because replaying onto the source topic changes the delivery id."""
    target = Target(requested) if requested else Target.LANE1
    if target is Target.LANE1 and not route.lanes:
        raise DlqError(
            f"route {route.name} has no retry lanes: use --to origin"
            " (the replayed records get new delivery ids)"
        )
    return target


def _story(letter: Letter) -> story.StoryHeaders:
    told = story.decode(letter.headers)
    if told is not None:
        return told
    # A record siding did not write: it is its own origin.
    ref = letter.ref
    origin = story.Origin(ref.dlq_topic, ref.partition, ref.offset, letter.timestamp_ms)
    return story.StoryHeaders(origin=origin, attempt=1, lane=0, not_before_ms=0, hops=())


def replay_record(letter: Letter, target: Target, route: RouteConfig, now_ms: int) -> OutRecord:
    own = story.user_headers(letter.headers)
    told = _story(letter)
    if target is Target.ORIGIN:
        kept = tuple((n, v) for n, v in own if n != REPLAY_OF)
        replay_of = (REPLAY_OF, told.origin.delivery_id.encode())
        topic = origin_topic(letter, route)
        partition = origin_partition(route, topic, told.origin.partition)
        return OutRecord(topic, letter.key, letter.value, (*kept, replay_of), partition)
    origin = told.origin
    delivery = Delivery(
        id=origin.delivery_id,
        topic=origin.topic,
        partition=origin.partition,
        offset=origin.offset,
        key=letter.key,
        value=letter.value,
        headers=own,
        timestamp_ms=origin.timestamp_ms,
        attempt=told.attempt,
        lane=told.lane,
    )
    step = ToLane(
        lane=1,
        attempt=first_attempt_of_lane(1, route.lanes_as_model()),
        not_before_ms=now_ms,
        reason=REPLAY_REASON,
    )
    return lane_record(
        delivery,
        step,
        hops=told.hops,
        now_ms=now_ms,
        route=route.name,
        lane_topic=lambda k: naming.lane_topic(route.name, k),
    )


def origin_topic(letter: Letter, route: RouteConfig) -> str:
    """Where ``--to origin`` writes a letter back: the route's topic, or, for a route that
    reads several, the topic its story names as its origin (when the route still reads it)."""
    if route.single_topic is not None:
        return route.single_topic
    told = story.decode(letter.headers)
    if told is None:
        raise DlqError(
            f"dead letter {letter.ref.coordinates} has no siding story: its origin topic is"
            f" unknown, and route {route.name} reads several topics ({route.source_label})"
        )
    if not route.reads(told.origin.topic):
        raise DlqError(
            f"dead letter {told.origin.delivery_id}: route {route.name} no longer reads its"
            f" origin topic {told.origin.topic} ({route.source_label})"
        )
    return told.origin.topic


def origin_partition(route: RouteConfig, topic: str, partition: int) -> int | None:
    """Pure: the partition ``--to origin`` writes a letter to: for a route pinned to
    partitions of ``topic``, its origin partition when the route reads it, else the route's first
    pinned partition (never one another route of the group reads); otherwise ``None`` (by key, as
    any producer)."""
    pinned = route.pinned(topic)
    if pinned is None:
        return None
    return partition if partition in pinned else pinned[0]


def destination(target: Target, route: RouteConfig) -> str:
    """Where a merge writes, for people and the audit trail."""
    if target is Target.LANE1:
        return naming.lane_topic(route.name, 1)
    if route.single_topic is not None:
        return route.single_topic
    return f"origin topics ({route.source_label})"


def chunk_size(rate: float | None) -> int:
    """Letters per acknowledged write: a tenth of a second's worth under ``--rate``."""
    if not rate:
        return MAX_CHUNK
    return max(1, min(MAX_CHUNK, int(rate // 10)))


def pause_s(started_s: float, sent: int, rate: float | None, now_s: float) -> float:
    """How long to wait before sending more, so that ``sent`` letters took ``sent / rate`` s."""
    if not rate:
        return 0.0
    return max(0.0, started_s + sent / rate - now_s)
