"""Moving a route's offsets on the real pipeline (issue 11): ``siding offsets reset`` moves the
checkpoint and the group together and Spark really starts there; a group moved by Kafka's own
tooling while the route was stopped is honoured at start, loudly; a running route is not moved."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from siding import naming
from siding.cli import main
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_consumer import read_records
from siding.devkit.sim_produce import new_producer
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.kafka.reader import read_records as read_topic
from siding.model import delivery_id
from siding.pipeline.offline import offset_log
from siding.pipeline.offline.moves import MOVE_FILE, Move

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_ENTRY = "from siding.cli.main import main; main()"
# Record timestamps: offset n of each partition at BASE_MS + n s. Recent: the broker deletes
# records older than its retention (7 days) by their timestamps.
BASE_MS = (int(time.time()) - 3600) * 1000


def _produce(bootstrap: str, topic: str, offsets: range) -> None:
    producer = new_producer(bootstrap)
    for partition in (0, 1):
        for n in offsets:
            value = f"{partition}/{n}".encode()
            producer.produce(topic, value, partition=partition, timestamp=BASE_MS + n * 1000)
    assert producer.flush(30) == 0


def _cli(*args: str) -> Any:
    main._register()
    result = CliRunner().invoke(main.cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _column(data: dict[str, Any], field: str) -> dict[int, Any]:
    return {row["partition"]: row[field] for row in data["partitions"]}


class _Commands:
    """``siding offsets ...`` of one route, in this process (JSON out)."""

    def __init__(self, config: Path, route: str) -> None:
        self.route = route
        self.common = ["-c", str(config), "--route", route, "--json"]

    def show(self) -> dict[str, Any]:
        return dict(_cli("offsets", "show", *self.common))

    def reset(self, *target: str) -> dict[str, Any]:
        return dict(_cli("offsets", "reset", *self.common, *target))

    def planned(self, *target: str) -> dict[int, Any]:
        return _column(self.reset(*target), "new")

    def execute(self, *target: str) -> subprocess.CompletedProcess[str]:
        """``siding offsets reset ... --execute`` as its own process, as an operator runs it."""
        args = ["offsets", "reset", *self.common, *target, "--execute"]
        return subprocess.run(
            [sys.executable, "-c", _ENTRY, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def executed(self, *target: str) -> dict[str, Any]:
        done = self.execute(*target)
        assert done.returncode == 0, done.stderr
        assert f"route {self.route}: offsets reset (" in done.stderr  # the log line
        return dict(json.loads(done.stdout))

    def refused_while_running(self) -> None:
        done = self.execute("--to-earliest")
        assert done.returncode == 1
        assert done.stderr.startswith(f"error: route {self.route} is running (siding run of")
        assert "stop it before moving its offsets" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _move_group_like_kafka_tooling(bootstrap: str, group: str, tp: TopicPartition) -> None:
    """What ``kafka-consumer-groups --reset-offsets --execute`` sends: an OffsetCommit of the
    group, without metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [tp])])
    for future in futures.values():
        assert all(answer.error is None for answer in future.result().topic_partitions)


def _delivered(received_file: Path, topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of every record the consumer was sent, in any run."""
    received = {r.delivery_id for r in read_records(received_file)}
    return {(p, n) for p in (0, 1) for n in range(20) if delivery_id(topic, p, n) in received}


def _audit_trail(client_conf: dict[str, Any], route: str) -> list[dict[str, Any]]:
    return [json.loads(r.value or b"") for r in read_topic(client_conf, naming.audit_topic(route))]


def test_a_reset_and_a_group_moved_by_kafka_tooling_decide_where_the_route_starts(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a route on a two-partition topic that delivered offsets 0..9 of each partition
    topic, bootstrap = topic_name("moves"), kafka.bootstrap
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(topic, 2)])
    _produce(bootstrap, topic, range(10))
    sim, received_file = sim_consumer(latency_s=(0.001, 0.003))
    name, group = f"moves-{topic[-8:]}", f"{topic}-g"
    route = {"name": name, "topic": topic, "group": group, "endpoint": f"grpc://{sim.target}"}
    checkpoints, config = tmp_path / "checkpoints", tmp_path / "siding.toml"
    config.write_text(config_text(bootstrap, route, checkpoint_dir=checkpoints))
    query = checkpoints / name / "main"
    offsets = _Commands(config, name)

    def run() -> PipelineRun:
        return PipelineRun.from_route(bootstrap, route, checkpoint_dir=checkpoints, spark=spark)

    with run() as first:
        first.wait_committed({0: 10, 1: 10})
        # While it runs, `offsets show` reads, and a reset is refused in one line
        assert offsets.show()["running"].startswith(f"siding run of route {name}")
        offsets.refused_while_running()
    before = offset_log.read_position(query)
    assert before is not None and before.offsets[topic] == {0: 10, 1: 10}

    # When 10 more records per partition arrive while the route is stopped
    _produce(bootstrap, topic, range(10, 20))
    shown = offsets.show()
    assert shown["running"] is None and shown["batch"] == before.batch
    assert _column(shown, "checkpoint") == _column(shown, "group") == {0: 10, 1: 10}
    assert _column(shown, "group_by") == {0: "siding", 1: "siding"}
    assert _column(shown, "log_end") == {0: 20, 1: 20} and _column(shown, "lag") == {0: 10, 1: 10}

    # Then each reset mode plans its offsets, and a dry run changes nothing
    assert offsets.planned("--to-earliest") == {0: 0, 1: 0}
    assert offsets.planned("--to-latest") == {0: 20, 1: 20}
    at = datetime.fromtimestamp(BASE_MS / 1000 + 15, UTC).isoformat()  # offset 15's time
    assert offsets.planned("--to-datetime", at) == {0: 15, 1: 15}
    assert offsets.planned("--to-offset", "0:13") == {0: 13, 1: 10}
    assert offset_log.read_position(query) == before  # neither the checkpoint
    assert offsets.show()["partitions"] == shown["partitions"]  # nor the group moved

    # When partition 0 is reset to offset 13 with --execute
    done, after = offsets.executed("--to-offset", "0:13"), offset_log.read_position(query)
    assert done["executed"] and after is not None and after.offsets[topic] == {0: 13, 1: 10}
    assert after.batch == done["new_batch"] > before.batch
    moved = offsets.show()
    assert _column(moved, "checkpoint") == _column(moved, "group") == {0: 13, 1: 10}

    # And partition 1's group is moved to 16 by Kafka's own tooling
    _move_group_like_kafka_tooling(bootstrap, group, TopicPartition(topic, 1, 16))
    assert _column(offsets.show(), "group_by")[1] == "other"

    # Then the next run starts at 13 on partition 0 (siding's reset) and at 16 on partition 1
    # (the group, honoured with a warning), and the records in between are not delivered
    caplog.set_level(logging.WARNING, logger="siding.offsets")
    with run() as second:
        second.wait_committed({0: 20, 1: 20})
    warnings = [r.getMessage() for r in caplog.records if r.name == "siding.offsets"]
    assert any(
        f"group {group} was moved outside siding" in m and "partition 1 10 -> 16" in m
        for m in warnings
    ), warnings
    expected = {(p, n) for p in (0, 1) for n in range(10)}
    expected |= {(0, n) for n in range(13, 20)} | {(1, n) for n in range(16, 20)}
    assert _delivered(received_file, topic) == expected

    # And both moves are in the route's audit trail
    events = _audit_trail(first.client_conf, name)
    assert [(e["command"], e["status"]) for e in events] == [
        ("offsets reset", "ok"),
        ("offsets adopt", "ok"),
    ]
    assert events[0]["target"] == "to-offset 0:13"
    assert events[0]["partitions"] == [
        {"partition": 0, "checkpoint": 10, "group": 10, "new": 13},
        {"partition": 1, "checkpoint": 10, "group": 10, "new": 10},
    ]
    assert events[1]["partitions"][1] == {"partition": 1, "checkpoint": 10, "group": 16, "new": 16}


def test_a_route_without_a_checkpoint_position_moves_its_group_alone(
    kafka: EmbeddedKafka, tmp_path: Path, topic_name: Callable[[str], str]
) -> None:
    # Given a route that never ran a batch: Spark made its checkpoint folder and wrote the offsets
    # its source started from, but no batch (the source would start there again, not from the
    # group)
    topic, bootstrap = topic_name("fresh"), kafka.bootstrap
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(topic, 2)])
    _produce(bootstrap, topic, range(5))
    name, group = f"fresh-{topic[-8:]}", f"{topic}-g"
    route = {"name": name, "topic": topic, "group": group, "endpoint": "grpc://127.0.0.1:1"}
    checkpoints, config = tmp_path / "checkpoints", tmp_path / "siding.toml"
    config.write_text(config_text(bootstrap, route, checkpoint_dir=checkpoints))
    started = checkpoints / name / "main" / "sources" / "0"
    started.mkdir(parents=True)
    (started / "0").write_bytes(b"\x00v1\n" + json.dumps({topic: {"0": 0, "1": 0}}).encode())
    offsets = _Commands(config, name)
    assert _column(offsets.show(), "checkpoint") == {0: None, 1: None}

    # When it is reset to the latest offsets
    done = offsets.executed("--to-latest")

    # Then the group alone moved, marked as siding's, and the folder is set aside (not deleted)
    # so that the route starts from the group
    assert done["new_batch"] is None
    shown = offsets.show()
    assert _column(shown, "group") == {0: 5, 1: 5} and _column(shown, "lag") == {0: 0, 1: 0}
    assert _column(shown, "group_by") == {0: "siding", 1: "siding"}
    assert not (checkpoints / name / "main").exists()
    (aside,) = (checkpoints / name).glob("main.set-aside-*")
    assert (aside / "sources" / "0" / "0").exists()
    events = _audit_trail({"bootstrap.servers": bootstrap}, name)
    assert [(e["command"], e["batch"], e["count"]) for e in events] == [("offsets reset", None, 2)]

    # And a move interrupted after it was written down (before the group commit) is finished
    # first by the next reset, so the checkpoint and the group never stay apart
    interrupted = Move(group, topic, {0: 2, 1: 2}, "siding:reset")
    (checkpoints / name / MOVE_FILE).write_text(interrupted.to_json())
    assert offsets.show()["pending_move"] is True
    offsets.executed("--to-offset", "0:3")
    shown = offsets.show()
    assert _column(shown, "group") == {0: 3, 1: 2} and shown["pending_move"] is False
