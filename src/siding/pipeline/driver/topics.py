"""A route's topics at start: check its sources, create what it writes (driver side)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from siding import naming
from siding.config import RouteConfig
from siding.config.pins import missing_partitions
from siding.errors import RouteStopped
from siding.kafka.admin import TopicSpec, ensure_topics, existing_topics, topic_config
from siding.model import Ordering


class RouteFailed(RouteStopped):
    """A route could not start, or stopped; the message names the route and the cause."""


@dataclass(frozen=True)
class Prepared:
    """What a route's start found: its sources, the partitions its lanes have, and the
    partitions of every topic present then (on either of its clusters; ``read`` and
    ``written``: on each, when the route writes to another cluster than it reads)."""

    sources: tuple[str, ...]
    partitions: int
    present: Mapping[str, int]
    read: Mapping[str, int] | None = None
    written: Mapping[str, int] | None = None

    @property
    def on_source(self) -> Mapping[str, int]:
        """The topics present on the cluster the route reads."""
        return self.present if self.read is None else self.read

    @property
    def on_write(self) -> Mapping[str, int]:
        """The topics present on the cluster the route writes to."""
        return self.present if self.written is None else self.written


def prepare(
    admin: Any, route: RouteConfig, *, fenced: bool = False, write_admin: Any = None
) -> Prepared:
    """Check the route's sources and outputs, and create the topics it writes (its fence's
    too when ``fenced``: ``[fence]``). ``admin``: the cluster the route reads; ``write_admin``:
    the one it writes to, when that is another (``siding.config.cluster_name``)."""
    present = existing_topics(admin)
    sources = check_sources(route, present)
    # Lanes, the DLQ and the park topic hold the records of every source topic.
    partitions = max(present[t] for t in sources)
    written = present if write_admin is None else existing_topics(write_admin)
    owned = naming.topics_of(route)
    wanted = [*owned.lanes, owned.dlq, owned.state(naming.KEYS)]
    if route.progress_interval > 0:
        wanted.append(owned.state(naming.PROGRESS))
    wanted.append(owned.state(naming.LIVE))
    if fenced:
        wanted.append(owned.state(naming.FENCE))
    if held_topics(route, written):
        wanted.append(owned.hold)
    if route.parks or owned.park.name in written:
        wanted += [owned.park, owned.state(naming.SETTLED)]
    if missing := [t for t in route.outputs if t not in written]:
        raise RouteFailed(
            f"route {route.name}: output topic(s) {', '.join(missing)} do not exist"
            " (siding does not create output topics: docs/outputs.md)"
        )
    carry = carried(admin, sources)
    # Not ``write_admin or admin``: an AdminClient has a length (its queue), so 0 is falsy.
    target = admin if write_admin is None else write_admin
    ensure_topics(target, topic_specs(wanted, partitions, carry))
    if write_admin is None:
        return Prepared(sources, partitions, present)
    return Prepared(sources, partitions, {**written, **present}, read=present, written=written)


def carried(admin: Any, sources: Iterable[str]) -> dict[str, str]:
    """What record topics take from the sources: they carry the source's records whole, so
    they are as large as the largest (``max.message.bytes``, when a source sets it)."""
    sizes = [topic_config(admin, t, "max.message.bytes") for t in sources]
    size = max((s for s in sizes if s), key=int, default=None)
    return {"max.message.bytes": size} if size else {}


def topic_specs(
    topics: Iterable[naming.OwnedTopic], partitions: int, carry: Mapping[str, str]
) -> list[TopicSpec]:
    """Pure: how to create ``topics`` of a route whose sources have ``partitions``."""
    return [TopicSpec(t.name, t.partitions(partitions), t.config(carry)) for t in topics]


def held_topics(route: RouteConfig, present: Mapping[str, int] | set[str]) -> tuple[str, ...]:
    """The main lane reads the hold topic beside the source in key mode, and while the topic
    exists (records held before the route left key mode are still delivered)."""
    topic = naming.hold_topic(route.name)
    if route.ordering is Ordering.KEY or topic in present:
        return (topic,)
    return ()


def absent_partition_line(route: str, topic: str, partition: int, count: int) -> str:
    """Pure: why a route pinned to a partition its topic lacks does not start (one line)."""
    has = "1 partition: 0" if count == 1 else f"{count} partitions: 0-{count - 1}"
    return (
        f"route {route}: pinned partition {partition} of topic {topic} does not exist (the"
        f" topic has {has}); fix the route's partitions"
    )


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
        if absent := missing_partitions(route.pins, present):
            raise RouteFailed(absent_partition_line(route.name, *absent[0]))
        return route.source_topics
    own = set(naming.topics_of(route).names)
    own.update(t for t in present if t.startswith(naming.route_prefix(route.name)))
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
