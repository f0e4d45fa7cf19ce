"""``siding dlq stats``: counts by reason, by hour of death, and the top keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from siding.dlq.export import CountRow, check_target, write_counts
from siding.dlq.filters import LetterFilter
from siding.dlq.read import DlqScope, select_letters

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOP_KEYS = 10
# A key as text: UTF-8 when it is, else hex: (the same form --key accepts).
KEY_TEXT = (
    "CASE WHEN key IS NULL THEN NULL"
    " WHEN is_valid_utf8(cast(key AS STRING)) AND NOT startswith(cast(key AS STRING), 'hex:')"
    " THEN cast(key AS STRING) ELSE concat('hex:', lower(hex(key))) END"
)


@dataclass(frozen=True, slots=True)
class DlqStats:
    total: int
    by_reason: tuple[tuple[str, int], ...]
    by_hour: tuple[tuple[int, int], ...]
    top_keys: tuple[tuple[bytes | None, int], ...]


def _pairs(frame: DataFrame, column: str) -> list[tuple[object, int]]:
    return [(r[column], int(r["n"])) for r in frame.collect()]


def compute_stats(
    spark: SparkSession,
    scope: DlqScope,
    chosen: LetterFilter,
    *,
    top_keys: int = TOP_KEYS,
    out: Path | None = None,
) -> DlqStats:
    """The counts of the matching visible letters; with ``out``, also the full table of counts
    per (reason, hour, key) as a Parquet or CSV file."""
    if out is not None:
        check_target(out)
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    slim = select_letters(spark, scope, chosen).selectExpr(
        "reason",
        "unix_millis(date_trunc('HOUR', timestamp_millis(died_at))) AS hour_ms",
        "key",
    )
    # Three aggregations (four with --out) over one read of the DLQ.
    slim = slim.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        total = slim.count()
        reasons = slim.groupBy("reason").agg(F.count("*").alias("n")).orderBy(F.desc("n"))
        hours = slim.groupBy("hour_ms").agg(F.count("*").alias("n")).orderBy("hour_ms")
        keys = (
            slim.groupBy("key")
            .agg(F.count("*").alias("n"))
            .orderBy(F.desc("n"), F.asc("key"))
            .limit(top_keys)
        )
        stats = DlqStats(
            total=total,
            by_reason=tuple((str(v), n) for v, n in _pairs(reasons, "reason")),
            by_hour=tuple((int(str(v)), n) for v, n in _pairs(hours, "hour_ms")),
            top_keys=tuple(
                (bytes(v) if v is not None else None, n)  # type: ignore[call-overload]
                for v, n in _pairs(keys, "key")
            ),
        )
        if out is not None:
            _write(slim, out)
        return stats
    finally:
        slim.unpersist()


def _write(slim: DataFrame, out: Path) -> None:
    """One file (not Spark's folder of parts), written on the driver: the table is small."""
    from pyspark.sql import functions as F

    table = (
        slim.selectExpr("reason", "hour_ms", f"{KEY_TEXT} AS key")
        .groupBy("reason", "hour_ms", "key")
        .agg(F.count("*").alias("count"))
        .orderBy(F.desc("count"), "reason", "hour_ms", "key")
    )
    rows = [
        CountRow(str(r["reason"]), int(r["hour_ms"]), r["key"], int(r["count"]))
        for r in table.collect()
    ]
    write_counts(rows, out)
