"""Pure: every name siding derives from a route name, and the one list of the topics a route owns.

    siding.<route>.retry-<k>      retry lane k (k >= 1)
    siding.<route>.dlq            the dead-letter queue, unless ``dlq`` overrides it
    siding.<route>.parked         records whose call outlived its batch (docs/parking.md)
    siding.<route>.held           key mode: records waiting behind an earlier one of their key
    siding.<route>.state-<kind>   compacted state topics (``keys``, ``settled``, ``dlq-fate``, ...)
    <route>/main, <route>/retry-<k>, <route>/parked   checkpoints (under ``spark.checkpoint_dir``)

The final segment says what a topic is and the middle is the route, so two different (route,
what) pairs never share a name. docs/configuration.md ("Derived names") explains the scheme.
``owned_topics`` lists them all with the partitions and settings each is created with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Protocol

PREFIX = "siding"
_KIND = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")

TOPIC_NAME_MAX = 249
# Derived names add at most 46 characters around a route name; 200 keeps every one legal.
ROUTE_NAME_MAX = 200
_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")


def is_legal_topic_name(name: str) -> bool:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    return _is_name(name, TOPIC_NAME_MAX)


def is_safe_route_name(name: str) -> bool:
    """A route name every derived topic name and checkpoint directory can be built from."""
    return _is_name(name, ROUTE_NAME_MAX)


def _is_name(name: str, limit: int) -> bool:
    return (
        0 < len(name) <= limit
        and name not in (".", "..")
        and _LEGAL_NAME.fullmatch(name) is not None
    )


PARK_LANE = -1
"""The lane number of a route's park lane (its query, checkpoint and metrics)."""
MAIN = "main"
PARKED = "parked"
HELD = "held"
DLQ = "dlq"
_RETRY = "retry-"
_STATE = "state-"

# The kinds of state topic (``state_topic``).
KEYS = "keys"
SETTLED = "settled"
PROGRESS = "progress"
# Each worker's calls in flight now (siding.pipeline.executor.live).
LIVE = "live"
AUDIT = "audit"
# The route's fence: which driver holds it, at which epoch (siding.pipeline.driver.fence).
FENCE = "fence"
DLQ_FATE = "dlq-fate"


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
    return MAIN if lane == 0 else f"{_RETRY}{lane}"


def lane_topic(route_name: str, k: int) -> str:
    """The topic of retry lane ``k`` (1-based)."""
    if k < 1:
        raise ValueError(f"retry lanes are numbered from 1, got {k}")
    return _topic(route_name, lane_label(k))


def dlq_topic(route_name: str) -> str:
    """The default dead-letter topic of a route."""
    return _topic(route_name, DLQ)


def state_topic(route_name: str, kind: str) -> str:
    """A compacted state topic of a route; ``kind`` is 1-32 of ``[a-z0-9-]``."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"state topic kind {kind!r} must be 1-32 characters of [a-z0-9-]")
    return _topic(route_name, f"{_STATE}{kind}")


def audit_topic(route_name: str) -> str:
    """The route's audit trail: DLQ merges and purges, offsets moved (kept for good)."""
    return state_topic(route_name, AUDIT)


def route_prefix(route_name: str) -> str:
    """What every topic siding derives for the route starts with."""
    return f"{PREFIX}.{_checked(route_name)}."


def route_checkpoint_subdir(route_name: str) -> str:
    """The folder of a route's checkpoints (one per query inside), relative."""
    return _checked(route_name)


def checkpoint_subdir(route_name: str, lane: int) -> str:
    """The checkpoint folder of one streaming query (one per route and lane), relative."""
    return f"{route_checkpoint_subdir(route_name)}/{lane_label(lane)}"


def query_name(route_name: str, lane: int) -> str:
    """The Spark streaming query's name; unique per route and lane."""
    return f"{PREFIX}.{_checked(route_name)}.{lane_label(lane)}"


# -- the topics a route owns ------------------------------------------------------------------

COMPACTED: Mapping[str, str] = MappingProxyType(
    {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
)
"""Only the latest record per key matters (also the registry topic's settings)."""
# The audit trail is kept for good.
KEPT: Mapping[str, str] = MappingProxyType({"cleanup.policy": "delete", "retention.ms": "-1"})
# Settlements are short-lived: tombstones need not outlive an hour.
_SETTLED = {**COMPACTED, "delete.retention.ms": "3600000", "segment.ms": "3600000"}
# Progress records are rewritten every few hundred ms under a few keys: compact often, so a
# start reads little (docs/replay.md).
_PROGRESS = {**COMPACTED, "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
# Workers' in-flight reports (siding.pipeline.executor.live): only the last hour's are of any use.
_LIVE = {"cleanup.policy": "compact,delete", "retention.ms": "3600000", "segment.ms": "600000"}
# Fence records are keyed by epoch: the records of a claim race are never compacted away before
# it is settled (siding.pipeline.driver.lease).
_FENCE = {**COMPACTED, "min.compaction.lag.ms": "3600000"}
# Each state topic's settings, in the order ``owned_topics`` lists them.
STATE_KINDS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        KEYS: COMPACTED,
        SETTLED: _SETTLED,
        DLQ_FATE: COMPACTED,
        AUDIT: KEPT,
        LIVE: _LIVE,
        PROGRESS: _PROGRESS,
        FENCE: _FENCE,
    }
)


class Role(Enum):
    """What a topic a route owns is for."""

    LANE = "lane"
    DLQ = "dlq"
    HOLD = "hold"
    PARK = "park"
    STATE = "state"


# These hold the source's records whole: as many partitions as the source, as large records.
_CARRIERS = frozenset({Role.LANE, Role.DLQ, Role.HOLD, Role.PARK})


@dataclass(frozen=True)
class OwnedTopic:
    """One topic a route owns: its name, role, and the settings it is created with."""

    name: str
    role: Role
    settings: Mapping[str, str]
    kind: str = ""  # a state topic's kind
    lane: int | None = None  # a retry lane's number; PARK_LANE for the park topic

    @property
    def label(self) -> str:
        """The lane label of a retry lane or the park topic (``lane_label``); else empty."""
        return "" if self.lane is None else lane_label(self.lane)

    @property
    def carries_records(self) -> bool:
        """Whether it holds the source's records (lanes, DLQ, hold, park) or state."""
        return self.role in _CARRIERS

    def partitions(self, source: int = 1) -> int:
        """The source's partition count for record topics; state topics have one."""
        return source if self.carries_records else 1

    def config(self, carry: Mapping[str, str] | None = None) -> dict[str, str]:
        """Its topic settings; ``carry`` (the source's ``max.message.bytes``) goes to record
        topics only."""
        carried = dict(carry or {}) if self.carries_records else {}
        return {**carried, **self.settings}


@dataclass(frozen=True)
class OwnedTopics:
    """Every topic a route owns, whether it exists yet or not (``owned_topics``)."""

    lanes: tuple[OwnedTopic, ...]
    dlq: OwnedTopic
    hold: OwnedTopic
    park: OwnedTopic
    states: tuple[OwnedTopic, ...]

    @property
    def all(self) -> tuple[OwnedTopic, ...]:
        """Lanes first, then the DLQ, hold, park and state topics."""
        return (*self.lanes, self.dlq, self.hold, self.park, *self.states)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.all)

    @property
    def lane_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.lanes)

    def state(self, kind: str) -> OwnedTopic:
        for topic in self.states:
            if topic.kind == kind:
                return topic
        raise KeyError(f"no state topic of kind {kind!r}")


def owned_topics(route_name: str, lanes: int, dlq: str | None = None) -> OwnedTopics:
    """Pure: the topics of a route with ``lanes`` retry lanes; ``dlq`` overrides its DLQ."""
    return OwnedTopics(
        lanes=tuple(
            OwnedTopic(lane_topic(route_name, k), Role.LANE, {}, lane=k)
            for k in range(1, lanes + 1)
        ),
        dlq=OwnedTopic(dlq or dlq_topic(route_name), Role.DLQ, {}),
        hold=OwnedTopic(hold_topic(route_name), Role.HOLD, {}),
        park=OwnedTopic(park_topic(route_name), Role.PARK, {}, lane=PARK_LANE),
        states=tuple(
            OwnedTopic(state_topic(route_name, kind), Role.STATE, settings, kind)
            for kind, settings in STATE_KINDS.items()
        ),
    )


class NamedRoute(Protocol):
    """What naming reads of a route's settings (``siding.config.RouteConfig`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def dlq(self) -> str | None: ...

    @property
    def lanes(self) -> Sized: ...


def topics_of(route: NamedRoute) -> OwnedTopics:
    """The topics ``route`` owns."""
    return owned_topics(route.name, len(route.lanes), route.dlq)


def route_dlq(route: NamedRoute) -> str:
    """The dead-letter topic a route writes to: its ``dlq`` setting, else the default."""
    return topics_of(route).dlq.name


def route_lane_topics(route: NamedRoute) -> tuple[str, ...]:
    """The topics of the route's retry lanes, lane 1 first."""
    return topics_of(route).lane_names


def _topic(route_name: str, suffix: str) -> str:
    name = f"{route_prefix(route_name)}{suffix}"
    if not is_legal_topic_name(name):  # only a huge lane number gets here
        raise ValueError(f"derived topic name {name!r} is not a legal Kafka topic name")
    return name


def _checked(route_name: str) -> str:
    if not is_safe_route_name(route_name):
        raise ValueError(f"{route_name!r} is not a safe route name")
    return route_name
