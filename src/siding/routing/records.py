"""Pure: the retry-lane or DLQ record for a delivery whose step moved it off the line."""

from __future__ import annotations

from collections.abc import Callable

from siding.model import Delivery, LaneHop
from siding.routing import story
from siding.routing.producer import OutRecord
from siding.steps import Held, ToDlq, ToLane


def origin_of(delivery: Delivery) -> story.Origin:
    return story.Origin(delivery.topic, delivery.partition, delivery.offset, delivery.timestamp_ms)


def _carry(topic: str, delivery: Delivery, told: story.StoryHeaders) -> OutRecord:
    """``delivery``'s key, value and user headers, with its story, bound for ``topic``."""
    return OutRecord(topic, delivery.key, delivery.value, (*delivery.headers, *story.encode(told)))


def _hops(
    delivery: Delivery, before: tuple[LaneHop, ...], now_ms: int, reason: str
) -> tuple[LaneHop, ...]:
    return (*before, LaneHop(delivery.lane, delivery.attempt, now_ms, reason))


def lane_record(
    delivery: Delivery,
    step: ToLane,
    *,
    hops: tuple[LaneHop, ...],
    now_ms: int,
    route: str,
    lane_topic: Callable[[int], str],
) -> OutRecord:
    """The record that carries ``delivery`` into retry lane ``step.lane``: same key, value and
    user headers, plus its story (next attempt, not-before time, every lane passed)."""
    told = story.StoryHeaders(
        origin=origin_of(delivery),
        attempt=step.attempt,
        lane=step.lane,
        not_before_ms=step.not_before_ms,
        hops=_hops(delivery, hops, now_ms, step.reason),
        reason=step.reason,
        route=route,
    )
    return _carry(lane_topic(step.lane), delivery, told)


def dlq_record(
    delivery: Delivery,
    step: ToDlq,
    *,
    hops: tuple[LaneHop, ...],
    now_ms: int,
    route: str,
    dlq_topic: str,
) -> OutRecord:
    """The dead letter: the original record plus everything invariant 6 asks for."""
    told = story.StoryHeaders(
        origin=origin_of(delivery),
        attempt=delivery.attempt,
        lane=delivery.lane,
        not_before_ms=0,
        hops=_hops(delivery, hops, now_ms, step.reason),
        reason=step.reason,
        died_at_ms=now_ms,
        route=route,
        dead_class=step.dead_class,
    )
    return _carry(dlq_topic, delivery, told)


def requeue_record(
    delivery: Delivery,
    *,
    not_before_ms: int,
    hops: tuple[LaneHop, ...],
    route: str,
    lane_topic: Callable[[int], str],
) -> OutRecord:
    """The same lane record again, story unchanged: it is not due yet (a long Retry-After)."""
    told = story.StoryHeaders(
        origin=origin_of(delivery),
        attempt=delivery.attempt,
        lane=delivery.lane,
        not_before_ms=not_before_ms,
        hops=hops,
        reason=hops[-1].reason if hops else "",
        route=route,
    )
    return _carry(lane_topic(delivery.lane), delivery, told)


def park_record(
    delivery: Delivery,
    *,
    token: str,
    not_before_ms: int,
    hops: tuple[LaneHop, ...],
    route: str,
    park_topic: str,
    deaths: int = 0,
    lone: int = 0,
) -> OutRecord:
    """The record that stands for a call still running when its batch ended: same attempt and
    lane, the call's token, and a not-before after which an unsettled call counts as lost; or
    for a suspect handed over (``deaths`` > 0, ``lone`` of them with no other suspect out) to be
    sent alone by the park lane."""
    reason = "parked: the call outlived its batch"
    if deaths:
        reason = f"suspect: the consumer died {deaths} times with it out"
    told = story.StoryHeaders(
        origin=origin_of(delivery),
        attempt=delivery.attempt,
        lane=delivery.lane,
        not_before_ms=not_before_ms,
        hops=hops,
        reason=reason,
        route=route,
        park_token=token,
        deaths=deaths,
        lone_deaths=lone,
    )
    return _carry(park_topic, delivery, told)


def hold_record(
    delivery: Delivery,
    step: Held,
    *,
    hops: tuple[LaneHop, ...],
    route: str,
    hold_topic: str,
) -> OutRecord:
    """The record that holds ``delivery`` behind an earlier record of its key: same attempt and
    story (it has not failed, so no hop is added), due as soon as its key lets it go."""
    told = story.StoryHeaders(
        origin=origin_of(delivery),
        attempt=delivery.attempt,
        lane=delivery.lane,
        not_before_ms=0,
        hops=hops,
        reason=step.reason,
        route=route,
    )
    return _carry(hold_topic, delivery, told)
