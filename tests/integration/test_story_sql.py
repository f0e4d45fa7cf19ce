"""Spark SQL reads each story field from the story itself, not from a producer's header of the
same name that comes before it (docs/headers.md)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from siding.model import LaneHop
from siding.pipeline.driver.batch import NOT_BEFORE_EXPR
from siding.pipeline.driver.park_batch import TOKEN_EXPRS
from siding.routing import story

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

USERS_OWN = (
    ("siding.not-before", b"99999999999999"),
    ("siding.park-token", b"forged"),
    ("siding.lane", b"7"),
    ("siding.reason", b"mine"),
)
TOLD = story.StoryHeaders(
    origin=story.Origin("orders", 0, 5, 1),
    attempt=2,
    lane=1,
    not_before_ms=1234,
    hops=(LaneHop(0, 1, 1, "retry"),),
    reason="retry",
    park_token="t-1",
)


def _frame(spark: SparkSession, told: story.StoryHeaders) -> DataFrame:
    headers = [{"key": k, "value": bytearray(v)} for k, v in (*USERS_OWN, *story.encode(told))]
    return spark.createDataFrame([(headers,)], "headers array<struct<key: string, value: binary>>")


def test_the_story_wins_over_the_producers_headers_of_the_same_name(spark: SparkSession) -> None:
    frame = _frame(spark, TOLD)
    assert frame.selectExpr(NOT_BEFORE_EXPR).collect()[0]["nb"] == 1234
    marks = frame.selectExpr(*TOKEN_EXPRS).collect()[0]
    assert (marks["token"], marks["nb"]) == ("t-1", 1234)
    fields = frame.selectExpr(
        f"{story.sql_field(story.LANE)} AS lane", f"{story.sql_field(story.REASON)} AS reason"
    ).collect()[0]
    assert (fields["lane"], fields["reason"]) == ("1", "retry")


def test_an_unset_story_field_is_empty_not_the_producers(spark: SparkSession) -> None:
    # A lane record's story has no park token; the producer's "forged" must not be read as one.
    lane_record = _frame(spark, dataclasses.replace(TOLD, park_token=""))
    marks = lane_record.selectExpr(*TOKEN_EXPRS).collect()[0]
    assert marks["token"] == ""
