"""Checkpoint ownership: the pure decision, the offset-log reading and the owner file."""

from __future__ import annotations

from pathlib import Path

import pytest

from siding.errors import CheckpointError
from siding.pipeline.offline import owner
from siding.pipeline.offline.owner import Judgement, Owner, SparkState, judge

PATH = "/ck/quickstart"
MINE = Owner("quickstart", "orders", "cluster-a")
USED = SparkState(has_offsets=True, topics=frozenset({"orders"}))


@pytest.mark.parametrize(
    ("recorded", "current", "state", "expected"),
    [
        # A fresh checkpoint is claimed; an unused one (no Spark offsets) by anyone.
        (None, MINE, SparkState(), Judgement(write=True)),
        (Owner("quickstart", "old", "cluster-z"), MINE, SparkState(), Judgement(write=True)),
        (MINE, MINE, SparkState(), Judgement()),
        # The owner starting again.
        (MINE, MINE, USED, Judgement()),
        # A cluster that does not say its id is not compared.
        (MINE, Owner("quickstart", "orders", ""), USED, Judgement()),
        # Written before owner files: adopted when its offsets name the topic, or none.
        (None, MINE, USED, Judgement(write=True)),
        (None, MINE, SparkState(has_offsets=True), Judgement(write=True)),
    ],
)
def test_who_may_use_a_checkpoint(
    recorded: Owner | None, current: Owner, state: SparkState, expected: Judgement
) -> None:
    assert judge(PATH, recorded, current, state) == expected


@pytest.mark.parametrize(
    ("current", "named"),
    [
        (Owner("quickstart", "orders-2", "cluster-a"), "topic orders on"),
        (Owner("quickstart", "orders", "cluster-b"), "Kafka cluster cluster-a"),
        (Owner("other", "orders", "cluster-a"), "route quickstart"),
    ],
)
def test_another_topic_cluster_or_route_is_refused_in_one_line(current: Owner, named: str) -> None:
    problem = judge(PATH, MINE, current, USED).problem
    assert problem.startswith(f"checkpoint {PATH} belongs to route quickstart, topic orders")
    assert named in problem
    assert current.describe() in problem
    assert "checkpoint_dir" in problem and f"delete {PATH}" in problem
    assert "\n" not in problem


def test_an_old_checkpoint_of_another_topic_is_refused_by_its_spark_offsets() -> None:
    state = SparkState(has_offsets=True, topics=frozenset({"old-topic"}))
    problem = judge(PATH, None, MINE, state).problem
    assert "belongs to topic old-topic" in problem and "checkpoint_dir" in problem


OFFSET_LOG = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"200"}}\n'
    '{"orders":{"0":10,"1":4},"siding.q.held":{"0":0}}'
)


def test_the_topics_of_a_spark_offset_log_file() -> None:
    assert owner.topics_in_offset_log(OFFSET_LOG) == {"orders", "siding.q.held"}
    assert owner.topics_in_offset_log("v1\n{}\n-") == frozenset()


def _spark_batch(route_dir: Path, query: str, batch: int, text: str = OFFSET_LOG) -> None:
    offsets = route_dir / query / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    (offsets / str(batch)).write_text(text)
    (offsets / f".{batch}.crc").write_bytes(b"\0")


def test_spark_state_reads_the_main_lanes_latest_batch(tmp_path: Path) -> None:
    assert owner.read_spark_state(tmp_path / "absent", "main") == SparkState()
    _spark_batch(tmp_path, "retry-1", 0, "v1\n{}\n" + '{"siding.q.retry-1":{"0":1}}')
    assert owner.read_spark_state(tmp_path, "main") == SparkState(True, frozenset())
    _spark_batch(tmp_path, "main", 2, "v1\n{}\n" + '{"old":{"0":1}}')
    _spark_batch(tmp_path, "main", 10)
    assert owner.read_spark_state(tmp_path, "main").topics == {"orders", "siding.q.held"}


def test_the_owner_file_is_written_once_and_then_enforced(tmp_path: Path) -> None:
    route_dir = tmp_path / "quickstart"
    # Given a route's first start: it claims its checkpoint
    assert owner.check(route_dir, MINE, "main").write
    owner.claim(route_dir, MINE)
    assert owner.read_owner(route_dir) == MINE
    _spark_batch(route_dir, "main", 0)
    # When the same checkpoint is started against another topic
    with pytest.raises(CheckpointError) as caught:
        owner.check(route_dir, Owner("quickstart", "orders-2", "cluster-a"), "main")
    # Then it is refused, and the owner file names what it belongs to
    assert str(route_dir) in str(caught.value)
    assert not owner.check(route_dir, MINE, "main").write


def test_an_unreadable_owner_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / owner.OWNER_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match=owner.OWNER_FILE):
        owner.check(tmp_path, MINE, "main")


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("/var/lib/siding/ck", Path("/var/lib/siding/ck")),
        ("file:///var/lib/siding/ck", Path("/var/lib/siding/ck")),
        ("file:/var/lib/my%20ck", Path("/var/lib/my ck")),
        ("hdfs://nn:8020/siding/ck", None),
        ("s3a://bucket/ck", None),
    ],
)
def test_owner_files_are_kept_on_local_storage_only(configured: str, expected: Path | None) -> None:
    assert owner.local_dir(configured) == expected
