"""A route's topics at start: check its sources, create what it writes (driver side)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from siding import naming
from siding.config import RouteConfig
from siding.errors import SidingError
from siding.kafka.admin import TopicSpec, ensure_topics, existing_topics, topic_config
from siding.model import Ordering


class RouteFailed(SidingError):
    """A route's query stopped with an error; the message names the route and the cause."""


_COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
# Settlements are short-lived: tombstones need not outlive an hour.
_SETTLED = {**_COMPACTED, "delete.retention.ms": "3600000", "segment.ms": "3600000"}
# Progress records are rewritten every few hundred ms under a few keys: compact often, so a
# start reads little (docs/replay.md).
_PROGRESS = {**_COMPACTED, "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
# Workers' in-flight reports (siding.pipeline.executor.live): only the last hour's are of any use.
_LIVE = {"cleanup.policy": "compact,delete", "retention.ms": "3600000", "segment.ms": "600000"}


@dataclass(frozen=True)
class Prepared:
    """What a route's start found: its sources, the partitions its lanes have, and the
    partitions of every topic present then."""

    sources: tuple[str, ...]
    partitions: int
    present: Mapping[str, int]


def prepare(admin: Any, route: RouteConfig) -> Prepared:
    """Check the route's sources and outputs, and create the topics it writes."""
    present = existing_topics(admin)
    sources = check_sources(route, present)
    # Lanes, the DLQ and the park topic hold the records of every source topic.
    partitions = max(present[t] for t in sources)
    # Lanes, the DLQ and the park topic carry the source's records whole: as large as it.
    sizes = [topic_config(admin, t, "max.message.bytes") for t in sources]
    size = max((s for s in sizes if s), key=int, default=None)
    carry = {"max.message.bytes": size} if size else {}
    specs = [TopicSpec(t, partitions, carry) for t in naming.route_lane_topics(route)]
    specs.append(TopicSpec(naming.route_dlq(route), partitions, carry))
    specs.append(TopicSpec(naming.state_topic(route.name, "keys"), 1, _COMPACTED))
    if route.progress_interval > 0:
        specs.append(TopicSpec(naming.state_topic(route.name, "progress"), 1, _PROGRESS))
    specs.append(TopicSpec(naming.state_topic(route.name, naming.LIVE), 1, _LIVE))
    if held_topics(route, present):
        specs.append(TopicSpec(naming.hold_topic(route.name), partitions, carry))
    if route.parks or naming.park_topic(route.name) in present:
        specs.append(TopicSpec(naming.park_topic(route.name), partitions, carry))
        specs.append(TopicSpec(naming.state_topic(route.name, "settled"), 1, _SETTLED))
    if missing := [t for t in route.outputs if t not in present]:
        raise RouteFailed(
            f"route {route.name}: output topic(s) {', '.join(missing)} do not exist"
            " (siding does not create output topics: docs/outputs.md)"
        )
    ensure_topics(admin, specs)
    return Prepared(sources, partitions, present)


def held_topics(route: RouteConfig, present: Mapping[str, int] | set[str]) -> tuple[str, ...]:
    """The main lane reads the hold topic beside the source in key mode, and while the topic
    exists (records held before the route left key mode are still delivered)."""
    topic = naming.hold_topic(route.name)
    if route.ordering is Ordering.KEY or topic in present:
        return (topic,)
    return ()


def check_sources(route: RouteConfig, present: Mapping[str, int]) -> tuple[str, ...]:
    """The route's source topics that exist now; ``RouteFailed`` when one it names is missing,
    when its pattern matches none yet, or when the pattern matches a topic siding writes for
    the route (it would read its own lanes)."""
    if route.topic_pattern is None:
        missing = [t for t in route.source_topics if t not in present]
        if missing:
            which = "topic" if len(missing) == 1 else "topics"
            raise RouteFailed(
                f"route {route.name}: source {which} {', '.join(missing)} does not exist"
            )
        return route.source_topics
    own = {
        *naming.route_lane_topics(route),
        naming.route_dlq(route),
        naming.hold_topic(route.name),
        naming.park_topic(route.name),
    }
    own.update(t for t in present if t.startswith(f"{naming.PREFIX}.{route.name}."))
    for topic in sorted(own):
        if route.reads(topic):
            raise RouteFailed(
                f"route {route.name}: topic_pattern {route.topic_pattern!r} matches {topic},"
                " a topic siding writes for the route"
            )
    sources = route.matching(present)
    if not sources:
        raise RouteFailed(
            f"route {route.name}: no topic matches topic_pattern {route.topic_pattern!r} yet"
            " (create one first: the lanes are sized by the source's partitions)"
        )
    return sources
