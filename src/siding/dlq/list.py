"""``siding dlq list``: one row per visible dead letter that matches, in DLQ log order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from siding.dlq.filters import LetterFilter
from siding.dlq.read import DlqScope, lanes_passed, select_letters

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Only this much of each payload leaves the executors; the preview needs no more.
PREVIEW_BYTES = 512


@dataclass(frozen=True, slots=True)
class LetterRow:
    id: str
    topic: str
    partition: int
    offset: int
    dlq_partition: int
    dlq_offset: int
    key: bytes | None
    value_head: bytes | None
    value_size: int | None
    reason: str
    attempt: int
    lanes: tuple[int, ...]
    died_at_ms: int


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def list_letters(
    spark: SparkSession, scope: DlqScope, chosen: LetterFilter, limit: int | None
) -> list[LetterRow]:
    frame = lanes_passed(select_letters(spark, scope, chosen)).selectExpr(
        "id",
        "topic",
        "partition",
        "offset",
        "dlq_partition",
        "dlq_offset",
        "key",
        f"substring(value, 1, {PREVIEW_BYTES}) AS value_head",
        "length(value) AS value_size",
        "reason",
        "attempt",
        "lanes",
        "died_at",
    )
    # Without an ORDER BY, a limit stops reading once it has enough rows.
    rows = frame.limit(limit).collect() if limit is not None else frame.collect()
    out = [
        LetterRow(
            id=r["id"],
            topic=r["topic"],
            partition=int(r["partition"]),
            offset=int(r["offset"]),
            dlq_partition=int(r["dlq_partition"]),
            dlq_offset=int(r["dlq_offset"]),
            key=_bytes(r["key"]),
            value_head=_bytes(r["value_head"]),
            value_size=r["value_size"],
            reason=r["reason"],
            attempt=int(r["attempt"]),
            lanes=tuple(int(x) for x in r["lanes"] or ()),
            died_at_ms=int(r["died_at"]),
        )
        for r in rows
    ]
    return sorted(out, key=lambda row: (row.dlq_partition, row.dlq_offset))
