"""Spark's offset and commit logs as siding reads and appends them (the files here are as
Spark 4.2 wrote them for a query of siding's; the real restart is in tests/e2e/test_offsets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from siding.errors import OffsetsError
from siding.pipeline.offline import offset_log
from siding.pipeline.offline.moves import Move

METADATA = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1795462682627,'
    '"conf":{"spark.sql.shuffle.partitions":"4"}}'
)
COMMIT = 'v1\n{"nextBatchWatermarkMs":0}'
# Spark's own checksum of COMMIT (commits/.0.crc of a real checkpoint).
COMMIT_CRC = bytes.fromhex("6372630000000200f32abfdd")


def _offsets(topics: str) -> str:
    return f"v1\n{METADATA}\n{topics}"


def _query(tmp_path: Path, batches: dict[int, str], commits: list[int]) -> Path:
    query = tmp_path / "main"
    for batch, topics in batches.items():
        offset_log.write_log_file(query / "offsets", batch, _offsets(topics))
    for batch in commits:
        offset_log.write_log_file(query / "commits", batch, COMMIT)
    initial = query / "sources" / "0"
    initial.mkdir(parents=True)
    (initial / "0").write_bytes(b'\x00v1\n{"t1":{"0":0,"1":0}}')
    return query


def test_the_checksum_is_hadoops_as_spark_writes_it() -> None:
    assert offset_log.hadoop_crc(COMMIT.encode()) == COMMIT_CRC
    long = offset_log.hadoop_crc(b"x" * 1025)
    assert long[:8] == b"crc\x00\x00\x00\x02\x00" and len(long) == 8 + 3 * 4  # 3 chunks


def test_an_entry_round_trips_and_moves_one_topic_only() -> None:
    text = _offsets('{"t1":{"0":5,"1":1},"siding.r.held":{"0":3,"1":0}}')
    entry = offset_log.parse_offset_entry(text, "offsets/0")
    assert entry.offsets == {"t1": {0: 5, 1: 1}, "siding.r.held": {0: 3, 1: 0}}
    assert entry.render() == text
    moved = entry.moved("t1", {0: 2, 1: 9})
    assert moved.offsets == {"t1": {0: 2, 1: 9}, "siding.r.held": {0: 3, 1: 0}}
    assert moved.render().split("\n")[:2] == ["v1", METADATA]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"v2\n{METADATA}\n{{}}", "version 'v2', not v1"),
        (f"v1\n{METADATA}\n{{}}\n{{}}", "expected one Kafka source, found 2"),
        (f"v1\n{METADATA}\n", "expected one Kafka source, found 0"),
        (f"v1\n{METADATA}\n[1]", "the source line is not Kafka offsets"),
    ],
)
def test_an_entry_siding_does_not_know_is_refused(text: str, message: str) -> None:
    with pytest.raises(OffsetsError, match=message):
        offset_log.parse_offset_entry(text, "offsets/3")


def test_the_position_is_the_last_committed_batch(tmp_path: Path) -> None:
    query = _query(tmp_path, {0: '{"t1":{"0":5}}', 1: '{"t1":{"0":8}}'}, commits=[0, 1])
    position = offset_log.read_position(query)
    assert position == offset_log.Position(1, {"t1": {0: 8}}, pending=None, next_batch=2)


def test_a_batch_not_committed_is_pending_and_the_next_goes_after_it(tmp_path: Path) -> None:
    query = _query(tmp_path, {0: '{"t1":{"0":5}}', 1: '{"t1":{"0":8}}'}, commits=[0])
    position = offset_log.read_position(query)
    assert position == offset_log.Position(0, {"t1": {0: 5}}, pending=1, next_batch=2)


def test_before_any_commit_the_position_is_where_the_source_started(tmp_path: Path) -> None:
    query = _query(tmp_path, {0: '{"t1":{"0":5,"1":2}}'}, commits=[])
    position = offset_log.read_position(query)
    assert position == offset_log.Position(-1, {"t1": {0: 0, 1: 0}}, pending=0, next_batch=1)
    assert offset_log.read_position(tmp_path / "nothing") is None


def test_appending_a_batch_moves_the_position_with_spark_s_files(tmp_path: Path) -> None:
    query = _query(tmp_path, {0: '{"t1":{"0":5}}', 1: '{"t1":{"0":8}}'}, commits=[0])
    entry = offset_log.latest_entry(query).moved("t1", {0: 2})
    offset_log.write_batch(query, 2, entry.render(), offset_log.latest_commit(query))
    assert offset_log.read_position(query) == offset_log.Position(
        2, {"t1": {0: 2}}, pending=None, next_batch=3
    )
    for log in ("offsets", "commits"):
        data = (query / log / "2").read_bytes()
        assert (query / log / ".2.crc").read_bytes() == offset_log.hadoop_crc(data)
        assert not list((query / log).glob("*.tmp"))
    assert (query / "commits" / "2").read_text() == COMMIT


def test_a_move_is_written_down_and_read_back() -> None:
    move = Move("g", "t", {0: 4, 3: 9}, "siding:reset", batch=7, offsets_text="v1", commit_text="c")
    assert Move.from_json(move.to_json()) == move
    alone = Move("g", "t", {0: 1}, "siding:reset", set_aside="main.set-aside-x")
    assert Move.from_json(alone.to_json()) == alone
