"""Read a route's DLQ as it is when the command starts: a bounded Spark batch read, story headers
decoded with Spark SQL expressions, letters with a fate hidden, the user's filter applied."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer

from siding import naming
from siding.config import RouteConfig, SidingConfig
from siding.dlq.fate import VALUE_SCHEMA, LetterRef
from siding.dlq.filters import LetterFilter
from siding.dlq.replay import Letter
from siding.errors import DlqError
from siding.kafka.reader import watermarks
from siding.routing import story

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Fates are joined by broadcast below this many records (each is ~100 bytes on the driver).
BROADCAST_FATES = 200_000
HOPS_SCHEMA = "array<struct<lane:int,attempt:int,at:bigint,reason:string>>"


@dataclass(frozen=True)
class DlqScope:
    """One command's view of a route's DLQ: which topics, and how far they reach right now."""

    route: RouteConfig
    dlq_topic: str
    fate_topic: str
    audit_topic: str
    client_conf: Mapping[str, object]
    spark_options: Mapping[str, str]
    ends: Mapping[int, tuple[int, int]]
    fate_ends: Mapping[int, tuple[int, int]] | None
    # The settings of the cluster the route reads, when its DLQ is on another (--to origin).
    origin_conf: Mapping[str, object] | None = None

    @property
    def records(self) -> int:
        """How many records the DLQ holds (with or without a fate)."""
        return sum(high - low for low, high in self.ends.values())

    @property
    def fates(self) -> int:
        return sum(high - low for low, high in (self.fate_ends or {}).values())


def topic_ends(client_conf: Mapping[str, object], topic: str) -> dict[int, tuple[int, int]] | None:
    """Partition -> (low, high) watermarks now; ``None`` when the topic does not exist."""
    consumer = Consumer(
        {**client_conf, "group.id": f"siding-dlq-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return None
        return {p: watermarks(consumer, topic, p) for p in sorted(found.partitions)}
    finally:
        consumer.close()


def open_scope(config: SidingConfig, route_name: str) -> DlqScope:
    route = config.route_named(route_name)
    cluster, source = (config.kafka.cluster_for(route, role) for role in ("write", "source"))
    client_conf = dict(cluster.client_config())
    owned = naming.topics_of(route)
    dlq_topic = owned.dlq.name
    ends = topic_ends(client_conf, dlq_topic)
    if ends is None:
        raise DlqError(f"DLQ topic {dlq_topic} of route {route.name} does not exist")
    fate_topic = owned.state(naming.DLQ_FATE).name
    return DlqScope(
        route=route,
        dlq_topic=dlq_topic,
        fate_topic=fate_topic,
        audit_topic=owned.state(naming.AUDIT).name,
        client_conf=client_conf,
        spark_options=cluster.spark_options(),
        ends=ends,
        fate_ends=topic_ends(client_conf, fate_topic),
        origin_conf=None if source is cluster else dict(source.client_config()),
    )


def _bounded(
    spark: SparkSession,
    options: Mapping[str, str],
    topic: str,
    ends: Mapping[int, tuple[int, int]],
) -> DataFrame:
    start = {topic: {str(p): -2 for p in ends}}  # -2: earliest still there
    end = {topic: {str(p): high for p, (_, high) in ends.items()}}
    parallelism = spark.sparkContext.defaultParallelism
    return (
        spark.read.format("kafka")
        .options(**options)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .option("includeHeaders", "true")
        # Retention may drop the head of the DLQ while we read it; that is not an error here.
        .option("failOnDataLoss", "false")
        .option("minPartitions", str(max(len(ends), parallelism)))
        .load()
    )


_header = story.sql_field

LETTER_COLUMNS = (
    "partition AS dlq_partition",
    "offset AS dlq_offset",
    f"coalesce({_header(story.ID)}, concat_ws('/', topic, partition, offset)) AS id",
    f"coalesce({_header(story.TOPIC)}, topic) AS topic",
    f"coalesce(try_cast({_header(story.PARTITION)} AS INT), partition) AS partition",
    f"coalesce(try_cast({_header(story.OFFSET)} AS BIGINT), offset) AS offset",
    "key",
    "value",
    "headers",
    "unix_millis(timestamp) AS dlq_ts",
    f"coalesce({_header(story.REASON)}, '') AS reason",
    f"coalesce(try_cast({_header(story.ATTEMPT)} AS INT), 1) AS attempt",
    f"coalesce(try_cast({_header(story.LANE)} AS INT), 0) AS lane",
    f"{_header(story.HOPS)} AS hops_json",
    f"coalesce(try_cast({_header(story.DIED_AT)} AS BIGINT), unix_millis(timestamp)) AS died_at",
)


def letters(spark: SparkSession, scope: DlqScope) -> DataFrame:
    """Every record of the DLQ up to its end at command start, one decoded row per letter."""
    raw = _bounded(spark, scope.spark_options, scope.dlq_topic, scope.ends)
    return raw.selectExpr(*LETTER_COLUMNS)


def lanes_passed(frame: DataFrame) -> DataFrame:
    """Adds ``lanes``: the distinct lanes of the letter's hops, in order."""
    from pyspark.sql import functions as F

    hops = F.from_json(F.col("hops_json"), HOPS_SCHEMA)
    lanes = F.array_distinct(F.transform(hops, lambda h: h["lane"]))
    return frame.withColumn("lanes", F.coalesce(lanes, F.array()))


def fates(spark: SparkSession, scope: DlqScope) -> DataFrame | None:
    """The current fate of every letter that has one (latest record per key; none if empty)."""
    if scope.fate_ends is None or scope.fates == 0:
        return None
    from pyspark.sql import functions as F

    raw = _bounded(spark, scope.spark_options, scope.fate_topic, scope.fate_ends)
    latest = raw.groupBy("key").agg(F.max_by("value", "offset").alias("value"))
    parsed = latest.select(
        F.col("key").cast("string").alias("coordinates"),
        F.from_json(F.col("value").cast("string"), VALUE_SCHEMA).alias("f"),
    )
    return parsed.where(F.col("f.fate").isNotNull()).select(
        "coordinates",
        F.col("f.fate").alias("fate"),
        F.col("f.id").alias("fate_id"),
        F.col("f.died_at").alias("fate_died_at"),
    )


def visible(spark: SparkSession, scope: DlqScope, frame: DataFrame) -> DataFrame:
    """``frame`` without the letters that were merged or purged."""
    done = fates(spark, scope)
    if done is None:
        return frame
    from pyspark.sql import functions as F

    if scope.fates <= BROADCAST_FATES:
        done = F.broadcast(done)
    coordinates = F.concat_ws(
        "/", F.lit(scope.dlq_topic), F.col("dlq_partition"), F.col("dlq_offset")
    )
    same = (
        (coordinates == done["coordinates"])
        & (frame["id"] == done["fate_id"])
        & frame["died_at"].eqNullSafe(done["fate_died_at"])
    )
    return frame.join(done, same, "left_anti")


LETTER_FIELDS = (
    "dlq_partition",
    "dlq_offset",
    "id",
    "died_at",
    "key",
    "value",
    "headers",
    "dlq_ts",
)


def condition(chosen: LetterFilter) -> Column | None:
    """The Spark condition of a filter; ``None`` when it lets everything through."""
    from pyspark.sql import functions as F

    parts: list[Column] = []
    if chosen.since_ms is not None:
        parts.append(F.col("died_at") >= F.lit(chosen.since_ms))
    if chosen.until_ms is not None:
        parts.append(F.col("died_at") < F.lit(chosen.until_ms))
    if chosen.reason is not None:
        parts.append(F.col("reason").rlike(chosen.reason))
    if chosen.key is not None:
        parts.append(F.col("key") == F.lit(bytearray(chosen.key)))
    if not parts:
        return None
    combined = parts[0]
    for part in parts[1:]:
        combined = combined & part
    return combined


def iter_letters(frame: DataFrame, dlq_topic: str) -> Iterator[Letter]:
    """The letters of ``frame`` streamed to the driver one Spark partition at a time."""
    for r in frame.selectExpr(*LETTER_FIELDS).toLocalIterator():
        ref = LetterRef(dlq_topic, r["dlq_partition"], r["dlq_offset"], r["id"], r["died_at"])
        headers = tuple(
            (str(h[0]), bytes(h[1]) if h[1] is not None else b"") for h in r["headers"] or ()
        )
        yield Letter(ref, _bytes(r["key"]), _bytes(r["value"]), headers, int(r["dlq_ts"]))


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def select_letters(spark: SparkSession, scope: DlqScope, chosen: LetterFilter) -> DataFrame:
    """The visible letters that match ``chosen``: what list, stats, merge and purge act on."""
    frame = letters(spark, scope)
    where = condition(chosen)
    if where is not None:
        frame = frame.where(where)
    return visible(spark, scope, frame)
