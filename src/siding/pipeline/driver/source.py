"""Spark Kafka source options for a route's main lane and its retry lanes (pure)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence

from siding.config import RouteConfig

EARLIEST = -2
LATEST = -1

Partitions = int | Sequence[int]
"""A topic's partitions: a count (all of them) or the ones a pinned route reads."""


def _numbers(partitions: Partitions) -> Sequence[int]:
    return range(partitions) if isinstance(partitions, int) else partitions


def starting_offsets(
    topic: str,
    partitions: Partitions,
    committed: Mapping[int, int],
    fallback: str,
) -> str:
    """``startingOffsets`` for a query with no checkpoint yet.

    The group's committed offsets when it has any, ``fallback`` (earliest/latest) for the other
    partitions; plain ``fallback`` when the group has none. ``partitions``: the topic's count,
    or the partitions a pinned route reads (the group's offsets of others are not looked at).
    """
    numbers = _numbers(partitions)
    committed = {p: o for p, o in committed.items() if p in numbers}
    if not committed:
        return fallback
    default = EARLIEST if fallback == "earliest" else LATEST
    spec = {str(p): committed.get(p, default) for p in numbers}
    return json.dumps({topic: spec})


def starting_offsets_of(
    topics: Mapping[str, tuple[Mapping[int, int], str]],
    partitions: Partitions | Mapping[str, Partitions],
) -> str:
    """``startingOffsets`` for a query that reads several topics (several source topics, the
    hold topic): per topic, the group's committed offsets and its fallback; Spark wants every
    partition of every topic named once any is. ``partitions``: one count for every topic, or
    each topic's own (a count, or the partitions a pinned route reads). With no committed
    offsets at all and one fallback, that fallback."""
    counts = partitions if isinstance(partitions, Mapping) else dict.fromkeys(topics, partitions)
    if len(topics) == 1:
        ((topic, (committed, fallback)),) = topics.items()
        return starting_offsets(topic, counts[topic], committed, fallback)
    numbers = {t: _numbers(counts[t]) for t in topics}
    read = {t: {p: o for p, o in c.items() if p in numbers[t]} for t, (c, _) in topics.items()}
    fallbacks = {fallback for _, fallback in topics.values()}
    if len(fallbacks) == 1 and not any(read.values()):
        return fallbacks.pop()
    spec: dict[str, dict[str, int]] = {}
    for topic, (_, fallback) in topics.items():
        default = EARLIEST if fallback == "earliest" else LATEST
        spec[topic] = {str(p): read[topic].get(p, default) for p in numbers[topic]}
    return json.dumps(spec)


def main_subscription(
    route: RouteConfig, held: tuple[str, ...], held_partitions: int = 0
) -> tuple[str, str]:
    """Spark's Kafka source option for a route's main lane: its source topics and ``held``
    (the hold topic, key mode) by ``subscribe``, a pattern that adds ``held`` to the route's
    ``topic_pattern`` by ``subscribePattern`` (one source takes one of the two), or, for a
    pinned route, its partitions and every one of ``held``'s ``held_partitions`` by ``assign``
    (the hold topic is the route's own)."""
    kind, value = route.subscription
    if not held:
        return kind, value
    if kind == "assign":
        assigned = json.loads(value)
        assigned.update({t: list(range(held_partitions)) for t in held})
        return kind, json.dumps(assigned)
    if kind == "subscribe":
        return kind, ",".join((value, *held))
    return kind, "|".join((f"(?:{value})", *(re.escape(t) for t in held)))


def topics_in(progress_json: str | None) -> tuple[str, ...]:
    """The topics named in a query progress's ``endOffset`` (or any offsets) JSON."""
    if not progress_json:
        return ()
    data = json.loads(progress_json)
    return tuple(data) if isinstance(data, dict) else ()


def read_by(route: RouteConfig, topics: Iterable[str]) -> tuple[str, ...]:
    """Pure: which of ``topics`` are the route's sources, sorted."""
    return tuple(sorted(t for t in topics if route.reads(t)))


def source_options(
    bootstrap_options: Mapping[str, str],
    topic: str,
    *,
    starting: str,
    min_partitions: int,
    max_offsets_per_trigger: int,
    subscribe: str = "subscribe",
) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka")``; ``topic`` may name several, by commas,
    be a regular expression with ``subscribe="subscribePattern"``, or the JSON of topics and
    partitions with ``subscribe="assign"`` (a pinned route)."""
    options = dict(bootstrap_options)
    options.update(
        {
            subscribe: topic,
            "includeHeaders": "true",
            "startingOffsets": starting,
            "maxOffsetsPerTrigger": str(max_offsets_per_trigger),
            # A record deleted by retention before delivery is data loss; say so, don't skip.
            "failOnDataLoss": "true",
        }
    )
    if min_partitions > 0:
        options["minPartitions"] = str(min_partitions)
    return options


def end_offsets(progress_json: str | None, topic: str) -> dict[int, int]:
    """Partition -> next offset from a query progress's ``endOffset`` JSON, for one topic."""
    if not progress_json:
        return {}
    data = json.loads(progress_json)
    if not isinstance(data, dict):
        return {}
    return {int(p): int(o) for p, o in data.get(topic, {}).items()}
