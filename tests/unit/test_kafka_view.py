"""The console's reading of Kafka, pure parts: lag, backlog and next due, letters, offered rate."""

from __future__ import annotations

import pytest

from siding.config import parse_config
from siding.control.kafka_view import (
    LetterSummary,
    PartitionLag,
    RouteKafka,
    lane_backlog,
    latest_first,
    letter_summary,
    offered_rate,
    partition_lag,
    printable_key,
    route_topics,
)
from siding.model import LaneHop
from siding.routing import story


@pytest.mark.parametrize(
    ("low", "end", "committed", "lag"),
    [
        (0, 100, 40, 60),
        (0, 100, None, 100),  # nothing committed yet: all that is in the log
        (50, 100, None, 50),  # retention removed the first 50
        (50, 100, 10, 50),  # committed before what is left: only what is left
        (0, 100, 120, 0),  # a truncated log: none, never negative
        (0, 0, None, 0),
    ],
)
def test_the_lag_of_a_partition(low: int, end: int, committed: int | None, lag: int) -> None:
    assert partition_lag("t", 0, low, end, committed) == PartitionLag("t", 0, end, committed, lag)


def test_a_lanes_backlog_adds_its_partitions_and_falls_due_at_the_earliest() -> None:
    lags = [partition_lag("l", p, 0, 10, 10 - p) for p in range(3)]
    backlog = lane_backlog("retry-1", "l", lags, [None, 2_000, 1_500])
    assert (backlog.backlog, backlog.next_due_ms) == (0 + 1 + 2, 1_500)
    assert lane_backlog("retry-1", "l", [], []).next_due_ms is None


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        (None, None),
        (b"customer-7", "customer-7"),
        (b"", ""),
        (b"\x00\xff", "base64:AP8="),
        (b"tab\there", "base64:dGFiCWhlcmU="),
        (b"x" * 60, "x" * 39 + "…"),
    ],
)
def test_keys_are_shown_as_text_or_base64(key: bytes | None, shown: str | None) -> None:
    assert printable_key(key) == shown


def _story(reason: str, died_at_ms: int | None) -> story.StoryHeaders:
    return story.StoryHeaders(
        origin=story.Origin("orders", 2, 41, 1_000),
        attempt=3,
        lane=1,
        not_before_ms=0,
        hops=(LaneHop(lane=1, attempt=2, reason="slow", at_ms=500),),
        reason=reason,
        died_at_ms=died_at_ms,
    )


def test_a_letter_names_the_original_record_and_its_reason() -> None:
    headers = [("trace", b"abc"), *story.encode(_story("unknown currency", 9_000))]
    letter = letter_summary(0, 7, b"k1", headers, timestamp_ms=9_500)
    assert letter == LetterSummary("orders/2/41", "unknown currency", "k1", 9_000, 0, 7)


def test_a_record_without_a_story_is_still_listed() -> None:
    letter = letter_summary(1, 3, None, [("siding.lane", b"7")], timestamp_ms=5)
    assert letter.id == "(no story) 1/3" and letter.timestamp_ms == 5


def test_the_latest_letters_come_newest_first() -> None:
    letters = [LetterSummary(str(i), "", None, t, 0, i) for i, t in enumerate([5, 9, 1, 9])]
    assert [x.id for x in latest_first(letters, 3)] == ["3", "1", "0"]


def test_the_offered_rate_is_what_arrived_between_two_polls() -> None:
    first = RouteKafka(partitions=(partition_lag("t", 0, 0, 100, 0),), polled_at_ms=1_000)
    second = RouteKafka(partitions=(partition_lag("t", 0, 0, 150, 0),), polled_at_ms=3_000)
    assert offered_rate(first, second) == 25.0
    assert offered_rate(None, second) is None
    grown = RouteKafka(
        partitions=(partition_lag("t", 0, 0, 150, 0), partition_lag("t", 1, 0, 5, 0)),
        polled_at_ms=3_000,
    )
    assert offered_rate(first, grown) is None  # a partition was added: no honest rate


def test_the_watched_topics_of_a_route() -> None:
    config = parse_config(
        """
[kafka]
bootstrap = "localhost:9092"
[[route]]
name = "billing"
topic = "billing.events"
group = "billing"
endpoint = "grpc://localhost:50051"
lanes = [{ delay = "1s" }, { delay = "30s" }]
"""
    )
    topics = route_topics(config.route[0])
    assert topics.sources == ("billing.events",) and topics.group == "billing"
    assert topics.lanes == (
        ("retry-1", "siding.billing.retry-1"),
        ("retry-2", "siding.billing.retry-2"),
        ("parked", "siding.billing.parked"),
    )
    assert topics.dlq == "siding.billing.dlq"
