"""A route pinned to partitions (issue 30, item 3) on the real pipeline: it reads only its
partitions (Spark's ``assign``), commits only theirs and leaves another partition's committed
offset in the group as it was; ``siding offsets show`` lists only its partitions; a pinned
partition the topic lacks stops the route at start in one line; a start that overlaps the claim of a
route running in another siding process is refused (docs/configuration.md, "A
route pinned to partitions"). The route runs in key mode, so its main lane's ``assign`` also
names its hold topic."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from siding import naming
from siding.cli import main
from siding.consumer import ConsumerServer, Reply, ack
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_produce import new_producer
from siding.kafka.admin import (
    TopicSpec,
    admin_client,
    commit_offsets,
    committed_positions,
    ensure_topics,
)
from siding.kafka.reader import read_to_end
from siding.model import Delivery
from siding.pipeline.driver.pin_claims import PINS_TOPIC, PinClaim, live_claims
from siding.pipeline.driver.topics import RouteFailed
from siding.routing.producer import DurableProducer, OutRecord
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PER_PARTITION = 6
# Partition 1's committed offset in the group before the route runs, set by "another proxy".
OTHERS = 2


def _produce(bootstrap: str, topic: str) -> None:
    producer = new_producer(bootstrap)
    for partition in (0, 1, 2):
        for n in range(PER_PARTITION):
            value = f"{partition}/{n}".encode()
            producer.produce(topic, value, key=value, partition=partition)
    assert producer.flush(30) == 0


def _offsets_show(config: Path, route: str) -> dict[str, object]:
    main._register()
    args = ["offsets", "show", "-c", str(config), "--route", route, "--json"]
    result = CliRunner().invoke(main.cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _write_claim(client_conf: dict[str, str], claim: PinClaim, *, tombstone: bool = False) -> None:
    """What another siding process running a pinned route writes (or, stopping, its tombstone)."""
    admin = admin_client(client_conf)
    ensure_topics(admin, [TopicSpec(PINS_TOPIC, 1, naming.COMPACTED)])
    producer = DurableProducer(client_conf)
    try:
        producer.write(
            [OutRecord(PINS_TOPIC, claim.key, None if tombstone else claim.encode(), ())]
        )
    finally:
        producer.close()


def test_a_route_pinned_to_partitions_0_and_2_reads_and_commits_only_them(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
) -> None:
    # Given a 3-partition topic with records in every partition, and a group whose partition 1
    # another proxy already committed at a known offset
    topic, bootstrap = topic_name("pinned"), kafka.bootstrap
    admin = admin_client({"bootstrap.servers": bootstrap})
    ensure_topics(admin, [TopicSpec(topic, 3)])
    _produce(bootstrap, topic)
    group = f"{topic}-g"
    commit_offsets(admin, group, topic, {1: OTHERS}, metadata="the other proxy")
    seen: list[tuple[int, int]] = []

    async def handle(d: Delivery) -> Reply:
        seen.append((d.partition, d.offset))
        return ack()

    server = ConsumerServer(handle)
    loop_thread.run(server.start())
    name = f"pinned-{topic[-8:]}"
    route = {
        "name": name,
        "topic": topic,
        "group": group,
        "partitions": [2, 0],
        # key mode: the main lane also reads the route's hold topic (every partition of it)
        "ordering": "key",
        "endpoint": f"grpc://{server.target}",
        "deadline": "5s",
    }
    checkpoints, config = tmp_path / "checkpoints", tmp_path / "siding.toml"
    config.write_text(config_text(bootstrap, route, checkpoint_dir=checkpoints))
    client_conf = {"bootstrap.servers": bootstrap}

    def claims() -> list[PinClaim]:
        now_ms = round(time.time() * 1000)
        found = live_claims(read_to_end(client_conf, PINS_TOPIC), now_ms, 30_000)
        return [c for c in found if c.group == group]

    def run() -> PipelineRun:
        return PipelineRun.from_route(bootstrap, route, checkpoint_dir=checkpoints, spark=spark)

    try:
        # Given another siding process that runs a route of the group pinned to partition 2
        other = PinClaim("other-proxy", group, topic, (2,), "host-b:7:x", round(time.time() * 1000))
        _write_claim(client_conf, other)
        # When the route pinned to partitions 0 and 2 starts, it is refused before Spark is asked
        with pytest.raises(RouteFailed, match=r"partition\(s\) 2 of topic .* route other-proxy"):
            run().app.start()
        # And once the other process stopped (its tombstone)
        _write_claim(client_conf, other, tombstone=True)
        assert claims() == []

        # When the route pinned to partitions 0 and 2 runs
        with run() as running:
            running.wait_committed({0: PER_PARTITION, 2: PER_PARTITION})
            shown = _offsets_show(config, name)
            # it holds its claim while it runs
            assert [(c.route, c.topic, c.partitions) for c in claims()] == [(name, topic, (0, 2))]
        # and gives it back when it stops
        assert claims() == []
        # Then every record of partitions 0 and 2 was delivered once, none of partition 1
        assert Counter(seen) == Counter((p, n) for p in (0, 2) for n in range(PER_PARTITION)), (
            sorted(seen)
        )

        # And the group's offsets of 0 and 2 are committed (siding's), partition 1's untouched
        group_now = committed_positions({"bootstrap.servers": bootstrap}, group, topic)
        assert {p: c.offset for p, c in group_now.items()} == {
            0: PER_PARTITION,
            1: OTHERS,
            2: PER_PARTITION,
        }
        assert group_now[1].metadata == "the other proxy"
        assert group_now[0].metadata.startswith("siding:")

        # And `siding offsets show` lists only the pinned partitions
        rows = {r["partition"]: r for r in shown["partitions"]}  # type: ignore[attr-defined]
        assert sorted(rows) == [0, 2]
        assert {p: (r["checkpoint"], r["lag"]) for p, r in rows.items()} == {
            0: (PER_PARTITION, 0),
            2: (PER_PARTITION, 0),
        }

        # When a route pinned to partition 7 of the 3-partition topic starts
        missing = {**route, "name": f"{name}-x", "group": f"{group}-x", "partitions": [0, 7]}
        wrong = PipelineRun.from_route(bootstrap, missing, checkpoint_dir=checkpoints, spark=spark)
        # Then it is refused at start in one line naming the route, the topic and the partition
        with pytest.raises(RouteFailed) as refused, wrong:
            pass
        assert str(refused.value) == (
            f"route {name}-x: pinned partition 7 of topic {topic} does not exist (the topic has"
            " 3 partitions: 0-2); fix the route's partitions"
        )
    finally:
        loop_thread.run(server.stop(0))
