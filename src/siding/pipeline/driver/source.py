"""Spark Kafka source options for a route's main lane and its retry lanes (pure)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from siding.config import RouteConfig

EARLIEST = -2
LATEST = -1


def starting_offsets(
    topic: str,
    partitions: int,
    committed: Mapping[int, int],
    fallback: str,
) -> str:
    """``startingOffsets`` for a query with no checkpoint yet.

    The group's committed offsets when it has any, ``fallback`` (earliest/latest) for the other
    partitions; plain ``fallback`` when the group has none.
    """
    if not committed:
        return fallback
    default = EARLIEST if fallback == "earliest" else LATEST
    spec = {str(p): committed.get(p, default) for p in range(partitions)}
    return json.dumps({topic: spec})


def starting_offsets_of(
    topics: Mapping[str, tuple[Mapping[int, int], str]], partitions: int | Mapping[str, int]
) -> str:
    """``startingOffsets`` for a query that reads several topics (several source topics, the
    hold topic): per topic, the group's committed offsets and its fallback; Spark wants every
    partition of every topic named once any is. ``partitions``: one count for every topic, or
    each topic's own. With no committed offsets at all and one fallback, that fallback."""
    counts = partitions if isinstance(partitions, Mapping) else dict.fromkeys(topics, partitions)
    if len(topics) == 1:
        ((topic, (committed, fallback)),) = topics.items()
        return starting_offsets(topic, counts[topic], committed, fallback)
    fallbacks = {fallback for _, fallback in topics.values()}
    if len(fallbacks) == 1 and not any(committed for committed, _ in topics.values()):
        return fallbacks.pop()
    spec: dict[str, dict[str, int]] = {}
    for topic, (committed, fallback) in topics.items():
        default = EARLIEST if fallback == "earliest" else LATEST
        spec[topic] = {str(p): committed.get(p, default) for p in range(counts[topic])}
    return json.dumps(spec)


def main_subscription(route: RouteConfig, held: tuple[str, ...]) -> tuple[str, str]:
    """Spark's Kafka source option for a route's main lane: its source topics and ``held``
    (the hold topic, key mode) by ``subscribe``, or a pattern that adds ``held`` to the
    route's ``topic_pattern`` by ``subscribePattern`` (one source takes one of the two)."""
    kind, value = route.subscription
    if not held:
        return kind, value
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
    or be a regular expression with ``subscribe="subscribePattern"``."""
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
