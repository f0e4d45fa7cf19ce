"""Pure: every name siding derives from a route name.

    siding.<route>.retry-<k>      retry lane k (k >= 1)
    siding.<route>.dlq            the dead-letter queue, unless ``dlq`` overrides it
    siding.<route>.parked         records whose call outlived its batch (docs/parking.md)
    siding.<route>.held           key mode: records waiting behind an earlier one of their key
    siding.<route>.state-<kind>   compacted state topics (``keys``, ``settled``, ``dlq-fate``, ...)
    <route>/main, <route>/retry-<k>, <route>/parked   checkpoints (under ``spark.checkpoint_dir``)

The final segment says what a topic is and the middle is the route, so two different (route,
what) pairs never share a name. docs/configuration.md ("Derived names") explains the scheme.
"""

from __future__ import annotations

import re

from siding.config import RouteConfig, is_legal_topic_name, is_safe_route_name

PREFIX = "siding"
_KIND = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")


PARK_LANE = -1
"""The lane number of a route's park lane (its query, checkpoint and metrics)."""
PARKED = "parked"
HELD = "held"


def park_topic(route_name: str) -> str:
    """The topic where a route's parked records wait for their calls to settle them."""
    return _topic(route_name, PARKED)


def hold_topic(route_name: str) -> str:
    """The topic where key mode's held records wait for an earlier record of their key; the
    main lane reads it beside the source topic (docs/dispatch.md, "Key ordering")."""
    return _topic(route_name, HELD)


def lane_label(lane: int) -> str:
    """``main`` for lane 0, ``retry-<k>`` for retry lane k, ``parked`` for the park lane."""
    if lane == PARK_LANE:
        return PARKED
    if lane < 0:
        raise ValueError(f"lane must be >= 0 (or PARK_LANE), got {lane}")
    return "main" if lane == 0 else f"retry-{lane}"


def lane_topic(route_name: str, k: int) -> str:
    """The topic of retry lane ``k`` (1-based)."""
    if k < 1:
        raise ValueError(f"retry lanes are numbered from 1, got {k}")
    return _topic(route_name, lane_label(k))


def dlq_topic(route_name: str) -> str:
    """The default dead-letter topic of a route."""
    return _topic(route_name, "dlq")


def state_topic(route_name: str, kind: str) -> str:
    """A compacted state topic of a route; ``kind`` is 1-32 of ``[a-z0-9-]``."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"state topic kind {kind!r} must be 1-32 characters of [a-z0-9-]")
    return _topic(route_name, f"state-{kind}")


AUDIT = "audit"
# Each worker's calls in flight now (siding.pipeline.executor.live).
LIVE = "live"


def audit_topic(route_name: str) -> str:
    """The route's audit trail: DLQ merges and purges, offsets moved (kept for good)."""
    return state_topic(route_name, AUDIT)


def route_checkpoint_subdir(route_name: str) -> str:
    """The folder of a route's checkpoints (one per query inside), relative."""
    return _checked(route_name)


def checkpoint_subdir(route_name: str, lane: int) -> str:
    """The checkpoint folder of one streaming query (one per route and lane), relative."""
    return f"{route_checkpoint_subdir(route_name)}/{lane_label(lane)}"


def query_name(route_name: str, lane: int) -> str:
    """The Spark streaming query's name; unique per route and lane."""
    return f"{PREFIX}.{_checked(route_name)}.{lane_label(lane)}"


def route_dlq(route: RouteConfig) -> str:
    """The dead-letter topic a route writes to: its ``dlq`` setting, else the default."""
    return route.dlq or dlq_topic(route.name)


def route_lane_topics(route: RouteConfig) -> tuple[str, ...]:
    """The topics of the route's retry lanes, lane 1 first."""
    return tuple(lane_topic(route.name, k) for k in range(1, len(route.lanes) + 1))


def _topic(route_name: str, suffix: str) -> str:
    name = f"{PREFIX}.{_checked(route_name)}.{suffix}"
    if not is_legal_topic_name(name):  # only a huge lane number gets here
        raise ValueError(f"derived topic name {name!r} is not a legal Kafka topic name")
    return name


def _checked(route_name: str) -> str:
    if not is_safe_route_name(route_name):
        raise ValueError(f"{route_name!r} is not a safe route name")
    return route_name
