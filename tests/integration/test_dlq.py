"""The DLQ tools against a real broker and Spark: filters, stats, merge, purge, fates, audit."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from siding import naming
from siding.devkit.broker import EmbeddedKafka
from siding.dlq.filters import LetterFilter, build_filter
from siding.dlq.list import list_letters
from siding.dlq.merge import merge_letters
from siding.dlq.purge import purge_letters
from siding.dlq.read import condition, letters
from siding.dlq.replay import REPLAY_OF, Target, resolve_target
from siding.dlq.stats import compute_stats
from siding.errors import DlqError
from siding.kafka.reader import read_records
from siding.routing import story
from tests.integration.dlq_support import (
    BASE_MS,
    HOUR_MS,
    Spec,
    make_config,
    scope_of,
    write_letters,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALL = LetterFilter()
BINARY = b"\xff\x00\xfe\x80binary"
SPECS = [
    Spec(0, b"alice", b'{"n": 0}', "dead: bad schema", BASE_MS),
    Spec(1, b"bob", b'{"n": 1}', "dead: bad schema", BASE_MS + 10_000),
    Spec(2, b"alice", b'{"n": 2}', "retries exhausted", BASE_MS + HOUR_MS, attempt=3, lane=2),
    Spec(3, BINARY, BINARY, "dead: not utf-8", BASE_MS + 2 * HOUR_MS),
    Spec(4, None, "caf\u00e9 \u2615".encode(), "retries exhausted", BASE_MS + 2 * HOUR_MS + 5),
]


def _ids(rows: list[object]) -> list[int]:
    return [r.offset for r in rows]  # type: ignore[attr-defined]


@pytest.fixture
def source(topic_name: Callable[[str], str]) -> str:
    return topic_name("src")


def test_each_filter_selects_exactly_its_letters(
    kafka: EmbeddedKafka, spark: SparkSession, source: str
) -> None:
    # Given five dead letters with different reasons, keys and times of death
    config = make_config(kafka.bootstrap, source)
    write_letters(config, SPECS)
    scope = scope_of(config)

    def chosen(**flags: str | None) -> LetterFilter:
        return build_filter(
            since=flags.get("since"),
            until=flags.get("until"),
            reason=flags.get("reason"),
            key=flags.get("key"),
            now_ms=BASE_MS + 3 * HOUR_MS,
        )

    # (the DLQ read once: each filter's Spark condition, what `select_letters` applies, then
    # runs on the same rows, not on a Kafka read of its own: ten reads took 75 s under load)
    read = letters(spark, scope).cache()

    def offsets(**flags: str | None) -> list[int]:
        where = condition(chosen(**flags))
        rows = (read if where is None else read.where(where)).select("offset").collect()
        return sorted(int(r["offset"]) for r in rows)

    # Then each filter keeps exactly the matching letters
    assert offsets() == [0, 1, 2, 3, 4]
    assert offsets(reason="^dead: bad") == [0, 1]
    assert offsets(reason="exhausted") == [2, 4]
    assert offsets(key="alice") == [0, 2]
    assert offsets(key="hex:" + BINARY.hex()) == [3]
    assert offsets(since="2026-01-01T01:00:00Z") == [2, 3, 4]
    assert offsets(until="2026-01-01T01:00:00+00:00") == [0, 1]
    assert offsets(since="2h") == [2, 3, 4]  # "now" is 03:00, so since 01:00
    assert offsets(since="1h30m", reason="exhausted") == [4]
    read.unpersist()
    # And `dlq list` applies them, from Kafka: a filter, and a limit
    listed = list_letters(spark, scope, chosen(since="1h30m", reason="exhausted"), None)
    assert [row.offset for row in listed] == [4]
    assert len(list_letters(spark, scope, ALL, 2)) == 2


def test_list_rows_tell_the_story_and_binary_is_safe(
    kafka: EmbeddedKafka, spark: SparkSession, source: str
) -> None:
    config = make_config(kafka.bootstrap, source)
    write_letters(config, SPECS)
    rows = {r.offset: r for r in list_letters(spark, scope_of(config), ALL, None)}
    retried = rows[2]
    assert retried.id == f"{source}/0/2" and retried.topic == source and retried.partition == 0
    assert (retried.attempt, retried.lanes, retried.reason) == (3, (0, 1, 2), "retries exhausted")
    assert retried.died_at_ms == BASE_MS + HOUR_MS
    binary = rows[3]
    assert binary.key == BINARY and binary.value_head == BINARY and binary.value_size == len(BINARY)
    assert rows[4].key is None and rows[4].value_head == "caf\u00e9 \u2615".encode()


def test_stats_count_by_reason_hour_and_key_and_write_files(
    kafka: EmbeddedKafka, spark: SparkSession, source: str, tmp_path: Path
) -> None:
    config = make_config(kafka.bootstrap, source)
    write_letters(config, SPECS)
    out = tmp_path / "stats.parquet"
    stats = compute_stats(spark, scope_of(config), ALL, out=out)
    assert stats.total == 5
    assert dict(stats.by_reason) == {
        "dead: bad schema": 2,
        "retries exhausted": 2,
        "dead: not utf-8": 1,
    }
    assert stats.by_hour == ((BASE_MS, 2), (BASE_MS + HOUR_MS, 1), (BASE_MS + 2 * HOUR_MS, 2))
    assert stats.top_keys[0] == (b"alice", 2)
    assert set(stats.top_keys[1:]) == {(b"bob", 1), (BINARY, 1), (None, 1)}
    table = spark.read.parquet(str(out)).collect()
    assert sum(r["count"] for r in table) == 5
    assert "hex:" + BINARY.hex() in {r["key"] for r in table}
    csv_file = tmp_path / "stats.csv"
    filtered = compute_stats(spark, scope_of(config), LetterFilter(key=b"alice"), out=csv_file)
    assert filtered.total == 2 and dict(filtered.by_reason) == {
        "dead: bad schema": 1,
        "retries exhausted": 1,
    }
    with csv_file.open() as lines:
        assert sum(int(r["count"]) for r in csv.DictReader(lines)) == 2


def test_merge_replays_exactly_the_matching_letters_once(
    kafka: EmbeddedKafka, spark: SparkSession, source: str
) -> None:
    # Given five dead letters, two of them with "exhausted" reasons
    config = make_config(kafka.bootstrap, source)
    write_letters(config, SPECS)
    route = config.route[0]
    chosen = LetterFilter(reason="exhausted")
    # When they are merged (the default target: retry lane 1)
    moved = merge_letters(spark, scope_of(config), chosen, Target.LANE1, clock=lambda: 1e9)
    # Then exactly those two are in lane 1, with their original identity and a fresh attempt
    assert moved == 2
    lane = read_records(config.kafka.client_config(), naming.lane_topic(route.name, 1))
    told = {s.origin.delivery_id: (s, r) for r in lane if (s := story.decode(r.headers))}
    assert set(told) == {f"{source}/0/2", f"{source}/0/4"}
    again, record = told[f"{source}/0/2"]
    assert (again.attempt, again.lane, again.not_before_ms) == (2, 1, 1_000_000_000_000)
    assert [h.lane for h in again.hops] == [0, 1, 2, 2]
    assert again.hops[-1].reason == "replayed from DLQ"
    assert record.key == b"alice" and record.value == b'{"n": 2}'
    assert told[f"{source}/0/4"][1].key is None
    # And they no longer show up; a second merge replays nothing
    assert _ids(list_letters(spark, scope_of(config), ALL, None)) == [0, 1, 3]  # type: ignore[arg-type]
    assert merge_letters(spark, scope_of(config), chosen, Target.LANE1) == 0
    assert len(read_records(config.kafka.client_config(), naming.lane_topic(route.name, 1))) == 2
    # And the audit trail says who merged what
    audit = [
        json.loads(r.value or b"")
        for r in read_records(config.kafka.client_config(), naming.state_topic(route.name, "audit"))
    ]
    assert [(e["command"], e["count"], e["status"]) for e in audit] == [
        ("merge", 2, "ok"),
        ("merge", 0, "ok"),
    ]
    assert audit[0]["filter"]["reason"] == "exhausted" and "@" in audit[0]["who"]


def test_a_merged_letter_that_dies_again_can_be_merged_again(
    kafka: EmbeddedKafka, spark: SparkSession, source: str
) -> None:
    config = make_config(kafka.bootstrap, source)
    write_letters(config, SPECS[:1])
    assert merge_letters(spark, scope_of(config), ALL, Target.LANE1) == 1
    assert list_letters(spark, scope_of(config), ALL, None) == []
    # When the same delivery dies again, it is a new dead letter
    write_letters(config, [Spec(0, b"alice", b'{"n": 0}', "dead again", BASE_MS + 99)])
    rows = list_letters(spark, scope_of(config), ALL, None)
    assert [(r.id, r.reason) for r in rows] == [(f"{source}/0/0", "dead again")]
    assert merge_letters(spark, scope_of(config), ALL, Target.LANE1) == 1


def test_merge_to_origin_marks_the_replay(
    kafka: EmbeddedKafka, spark: SparkSession, source: str
) -> None:
    config = make_config(kafka.bootstrap, source, lanes=False)
    user = (("trace", b"t-1"), ("blob", b"\x00\x01"))
    write_letters(config, [Spec(7, BINARY, BINARY, "dead", BASE_MS, headers=user)])
    with pytest.raises(DlqError, match="no retry lanes: use --to origin"):
        resolve_target(None, config.route[0])
    assert merge_letters(spark, scope_of(config), ALL, Target.ORIGIN) == 1
    [record] = read_records(config.kafka.client_config(), source)
    assert (record.key, record.value) == (BINARY, BINARY)
    assert record.headers == (*user, (REPLAY_OF, f"{source}/0/7".encode()))


def test_purge_refuses_without_yes_then_hides_the_letters(
    kafka: EmbeddedKafka, spark: SparkSession, source: str
) -> None:
    config = make_config(kafka.bootstrap, source)
    write_letters(config, SPECS)
    chosen = LetterFilter(key=b"alice")
    with pytest.raises(DlqError, match="refusing to purge 2 dead letter"):
        purge_letters(spark, scope_of(config), chosen, confirmed=False)
    assert len(list_letters(spark, scope_of(config), ALL, None)) == 5
    assert purge_letters(spark, scope_of(config), chosen, confirmed=True) == 2
    assert _ids(list_letters(spark, scope_of(config), ALL, None)) == [1, 3, 4]  # type: ignore[arg-type]
    assert compute_stats(spark, scope_of(config), ALL).total == 3
    assert merge_letters(spark, scope_of(config), chosen, Target.LANE1) == 0


def test_a_missing_dlq_topic_is_a_clear_error(kafka: EmbeddedKafka, source: str) -> None:
    config = make_config(kafka.bootstrap, source)
    with pytest.raises(DlqError, match=f"DLQ topic siding.{source}.dlq of route {source} does"):
        scope_of(config)
