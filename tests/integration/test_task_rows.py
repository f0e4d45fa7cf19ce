"""The rows a lane ships to its tasks (``rows.SELECT_EXPR``) on real Spark: no column needs
pyspark's row conversion, and every record arrives at the task exactly as Kafka holds it."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from siding.pipeline.executor.rows import SELECT_EXPR, incoming

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The Kafka source's columns that SELECT_EXPR reads.
KAFKA_SCHEMA = (
    "topic string, partition int, offset long, key binary, value binary,"
    " headers array<struct<key: string, value: binary>>, timestamp timestamp"
)
ODD = bytes(range(256))
HEADERS = [
    ("trace", b"abc"),
    ("ключ-ü", None),  # a non-ASCII name, a null value
    ("trace", ODD),  # the same name again, every byte value
    ("", b""),
]
WHEN = datetime.datetime(2026, 11, 27, 10, 0, 0, 123000, tzinfo=datetime.UTC)


def test_rows_need_no_conversion_and_arrive_byte_for_byte(spark: SparkSession) -> None:
    # Given source records with odd headers, null and empty keys and values, and no timestamp
    records = [
        ("orders", 0, 7, b"k", ODD, [(k, None if v is None else bytearray(v)) for k, v in HEADERS],
         WHEN),
        ("orders", 1, 8, None, None, [], None),
        ("orders", 2, 9, b"", b"", None, WHEN),
    ]  # fmt: skip
    frame = spark.createDataFrame(records, KAFKA_SCHEMA).selectExpr(*SELECT_EXPR)

    # When a task reads them
    [items] = frame.coalesce(1).rdd.mapPartitions(lambda rows: [incoming(list(rows), 0)]).collect()

    # Then pyspark hands the rows over as unpickled, without converting any field
    assert [f.name for f in frame.schema.fields if f.dataType.needConversion()] == []
    # And each delivery is the record, headers in order with their duplicates (a null header
    # value is delivered empty, as before)
    first, second, third = (item.delivery for item in items)
    assert (first.id, first.key, first.value, first.headers) == (
        "orders/0/7",
        b"k",
        ODD,
        tuple((k, v if v is not None else b"") for k, v in HEADERS),
    )
    assert first.timestamp_ms == int(WHEN.timestamp() * 1000)
    assert (second.key, second.value, second.headers, second.timestamp_ms) == (None, None, (), 0)
    assert (third.key, third.value, third.headers) == (b"", b"", ())
