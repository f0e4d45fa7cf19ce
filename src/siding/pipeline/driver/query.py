"""Start one streaming query of a route: where it starts reading, and the query itself."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from siding import naming
from siding.config import Role, RouteConfig, SidingConfig
from siding.kafka.admin import committed_offsets
from siding.pipeline.driver.source import source_options, starting_offsets, starting_offsets_of
from siding.pipeline.offline.storage import Place

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

# The lines keep the logger they had when the application wrote them (log filters select by it).
log = logging.getLogger("siding.pipeline.driver.app")

# Retry and park lanes hold records for seconds at least: polling them faster buys nothing.
SIDE_LANE_TRIGGER_S = 0.5


def starting(
    client_conf: Mapping[str, object],
    route: RouteConfig,
    topics: tuple[str, ...],
    *,
    partitions: int,
    known: Mapping[str, int],
    checkpoint: Place,
    lane: int,
) -> str:
    """``startingOffsets`` of a query reading ``topics``; ``known``: partitions of the topics
    present at the route's start (a topic it created has ``partitions``). A pinned route's
    source names only its partitions (Spark wants exactly those its ``assign`` names)."""
    if (checkpoint / "offsets").exists():
        return "earliest"  # ignored by Spark: the checkpoint is the source of truth
    fallback = route.starting_offsets if lane == 0 else "earliest"
    if len(topics) == 1:
        committed = committed_offsets(client_conf, route.group, topics[0])
        read = route.pinned(topics[0]) or partitions
        return starting_offsets(topics[0], read, committed, fallback)
    # The sources from the group or the route's setting; the hold topic from the group or
    # its beginning (what it holds was committed away from the source).
    return starting_offsets_of(
        {
            t: (
                committed_offsets(client_conf, route.group, t),
                fallback if route.reads(t) else "earliest",
            )
            for t in topics
        },
        {t: route.pinned(t) or known.get(t, partitions) for t in topics},
    )


def start_query(
    spark: SparkSession,
    config: SidingConfig,
    route: RouteConfig,
    name: str,
    topic: str,
    *,
    handler: Callable[[Any, int], None],
    checkpoint: Place,
    starting: str,
    subscribe: str = "subscribe",
    role: Role = "source",
) -> StreamingQuery:
    """Start the query ``name`` reading ``topic`` (a topic list or pattern, by ``subscribe``)
    into ``handler`` one batch at a time, from the route's ``role`` cluster (the main lane
    reads its source, the retry and park lanes the cluster the route writes to)."""
    trigger_s = config.spark.trigger
    if name != naming.query_name(route.name, 0):
        trigger_s = max(trigger_s, SIDE_LANE_TRIGGER_S)
    options = source_options(
        config.kafka.cluster_for(route, role).spark_options(),
        topic,
        starting=starting,
        min_partitions=route.min_partitions,
        max_offsets_per_trigger=route.max_offsets_per_trigger,
        subscribe=subscribe,
    )
    query = (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .writeStream.queryName(name)
        .foreachBatch(handler)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
        .start()
    )
    log.info("started %s on %s", name, topic)
    return query


# How Spark says that another process wrote the batch this query was about to log (its offset or
# commit log entry exists already): on a fenced route, the driver that lost the fence.
_LOG_WRITTEN_BY_ANOTHER = ("CONCURRENT_STREAM_LOG_UPDATE", "Multiple streaming jobs detected")
# A fenced route starts a query again this many times after such a write (a driver that lost its
# fence writes at most one offset and one commit entry per query before its own check stops it).
MAX_RESTARTS_AFTER_ANOTHER_WRITE = 3


def restart_after(error: str, *, holds_fence: bool, restarts: int) -> bool:
    """Whether a query that stopped on ``error`` is started again from its checkpoint: only on
    a route that holds its fence, only when Spark stopped it because another driver wrote to
    its checkpoint's logs (a driver that lost the fence, resuming, docs/operations.md "A split
    brain"), and at most ``MAX_RESTARTS_AFTER_ANOTHER_WRITE`` times. That entry is a batch
    planned from the same checkpoint, so running it loses nothing."""
    if not holds_fence or restarts >= MAX_RESTARTS_AFTER_ANOTHER_WRITE:
        return False
    return any(sign in error for sign in _LOG_WRITTEN_BY_ANOTHER)


# Where Spark's StreamingQueryException starts describing the query rather than the error.
_QUERY_SECTION = "=== Streaming Query ==="
# Lines of a Python or Java stack trace: they say where, never what failed.
_FRAME = re.compile(r'^\s*(File "|at [\w.$]+\(|Traceback \(|\.\.\. \d+ more)')


def short_error(text: str) -> str:
    """The line of a query's error that says what failed (Spark wraps it in many): siding's own
    error when there is one, else the first line that is not a stack frame. Spark's description
    of the query (from ``=== Streaming Query ===`` on: its name, offsets and plan) never is."""
    text = text.split(_QUERY_SECTION, 1)[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in lines if not _FRAME.match(line)]
    for line in said:
        if "siding.errors." in line or "BatchFailed" in line or "RouteStopped" in line:
            return line[:800]
    for line in said:
        if "siding" in line:
            return line[:800]
    return (said or lines or ["unknown error"])[0][:800]
