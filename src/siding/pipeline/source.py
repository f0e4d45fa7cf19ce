"""Spark Kafka source options for a route's main lane and its retry lanes (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping

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
    topics: Mapping[str, tuple[Mapping[int, int], str]], partitions: int
) -> str:
    """``startingOffsets`` for a query that reads several topics (the main lane and the hold
    topic): per topic, the group's committed offsets and its fallback; Spark wants every
    partition of every topic named once any is."""
    if len(topics) == 1:
        ((topic, (committed, fallback)),) = topics.items()
        return starting_offsets(topic, partitions, committed, fallback)
    spec: dict[str, dict[str, int]] = {}
    for topic, (committed, fallback) in topics.items():
        default = EARLIEST if fallback == "earliest" else LATEST
        spec[topic] = {str(p): committed.get(p, default) for p in range(partitions)}
    return json.dumps(spec)


def source_options(
    bootstrap_options: Mapping[str, str],
    topic: str,
    *,
    starting: str,
    min_partitions: int,
    max_offsets_per_trigger: int,
) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka")``; ``topic`` may name several, by commas."""
    options = dict(bootstrap_options)
    options.update(
        {
            "subscribe": topic,
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
