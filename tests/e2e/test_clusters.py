"""A second Kafka cluster (issue 30 item 4, docs/configuration.md "More than one cluster"): two
embedded brokers, one siding run, one Spark session. Route A reads cluster one and writes its lanes,
DLQ and state topics to cluster two; route B reads and writes cluster two. Each record lands on the
cluster its route says, and each group commit goes to the cluster its topic is on."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from siding import naming
from siding.config import parse_config
from siding.control.runner import SidingRun
from siding.devkit.broker import EmbeddedKafka, free_port
from siding.devkit.sim_produce import new_producer
from siding.devkit.wait import wait_until
from siding.dlq.filters import LetterFilter
from siding.dlq.list import list_letters
from siding.dlq.read import open_scope
from siding.errors import SidingError
from siding.kafka.admin import (
    TopicSpec,
    admin_client,
    committed_offsets,
    ensure_topics,
    existing_topics,
)
from siding.kafka.reader import read_records
from siding.pipeline.offline import moves
from siding.routing import story
from siding_consumer import ConsumerServer, Delivery, Reply, ack, dead, retry
from tests.conftest import unavailable
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VALUES = (b"ok 0", b"again", b"ok 1", b"pill", b"ok 2")


@pytest.fixture(scope="module")
def second() -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka()
    try:
        broker.start()
    except (SidingError, OSError) as exc:
        unavailable("a second Kafka broker", exc)
    try:
        yield broker
    finally:
        broker.stop()


class Consumer:
    """RETRY ``again`` once, then ACK it; DEAD for ``pill``; ACK the rest. Every call noted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes, int]] = []
        self._loops = LoopThread()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._serving: Future[None] | None = None
        self.target = ""

    async def handle(self, d: Delivery) -> Reply:
        value = d.value or b""
        self.calls.append((d.topic, value, d.attempt))
        if value == b"pill":
            return dead("pill")
        return retry() if value == b"again" and d.attempt == 1 else ack()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with ConsumerServer(self.handle, "127.0.0.1:0", grace_s=1) as server:
            self.target = server.target
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> Consumer:
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(), self._loops.loop)
        assert self._ready.wait(30), "the consumer did not start"
        return self

    def __exit__(self, *_: object) -> None:
        if self._stop is not None:
            self._loops.loop.call_soon_threadsafe(self._stop.set)
        if self._serving is not None:
            self._serving.result(30)
        self._loops.close()


class Running(SidingRun):
    failed: BaseException | None = None

    def check(self) -> None:
        if self.failed is not None:
            raise AssertionError(f"siding stopped: {self.failed}") from self.failed

    def run_here(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self.failed = exc


def _produce(bootstrap: str, topic: str, values: tuple[bytes, ...]) -> None:
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(topic)])
    producer = new_producer(bootstrap)
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0


def _status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/status", timeout=10) as answer:
        document: dict[str, Any] = json.loads(answer.read().decode())
    return {route["name"]: route.get("kafka") for route in document["routes"]}


def test_a_route_reads_one_cluster_and_writes_another_beside_a_route_on_the_second(
    kafka: EmbeddedKafka,
    second: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
) -> None:
    one, two = {"bootstrap.servers": kafka.bootstrap}, {"bootstrap.servers": second.bootstrap}
    source_a, source_b = topic_name("a"), topic_name("b")
    name_a, name_b = source_a[-60:], source_b[-60:]
    _produce(kafka.bootstrap, source_a, VALUES)
    _produce(second.bootstrap, source_b, (b"ok b0", b"ok b1"))
    with Consumer() as consumer:
        config = parse_config(f"""
[kafka]
bootstrap = "{kafka.bootstrap}"
[kafka.clusters.two]
bootstrap = "{second.bootstrap}"
[spark]
master = "local[2]"
checkpoint_dir = "{tmp_path / "ckpt"}"
trigger = "100ms"
[control]
listen = "127.0.0.1:{free_port()}"
[[route]]
name = "{name_a}"
topic = "{source_a}"
group = "{source_a}-g"
endpoint = "grpc://{consumer.target}"
write_cluster = "two"
lanes = [{{ delay = "1s", deadline = "10s" }}]
dlq_flood_min_batch = 1000000
[[route]]
name = "{name_b}"
topic = "{source_b}"
group = "{source_b}-g"
endpoint = "grpc://{consumer.target}"
cluster = "two"
""")
        route_a, route_b = config.route
        lane_a, dlq_a = naming.lane_topic(name_a, 1), naming.route_dlq(route_a)
        siding = Running(config, spark=spark)
        try:
            siding.start()
            threading.Thread(target=siding.run_here, daemon=True).start()

            def settled() -> bool:
                a = committed_offsets(one, route_a.group, source_a).get(0, 0) == len(VALUES)
                laned = committed_offsets(two, route_a.group, lane_a).get(0, 0) == 1
                b = committed_offsets(two, route_b.group, source_b).get(0, 0) == 2
                return a and laned and b

            # When both routes run in one siding: A's source and its lane are committed
            wait_until(settled, timeout_s=180, what="both routes' commits", check=siding.check)
            url = str(siding.url)

            def status_settled() -> bool:
                facts = _status(url)[name_a]
                return facts is not None and facts["dlq"]["size"] == 1 and facts["lag"] == 0

            # And /status reads A's lag on cluster one and its DLQ on cluster two
            wait_until(status_settled, timeout_s=30, what="/status", check=siding.check)
        finally:
            siding.stop()

    # Then the lane record and the dead letter of A are on cluster two, none of A's topics on one
    on_one, on_two = existing_topics(admin_client(one)), existing_topics(admin_client(two))
    prefix_a, prefix_b = naming.route_prefix(name_a), naming.route_prefix(name_b)
    assert [t for t in on_one if t.startswith((prefix_a, prefix_b))] == []
    assert {lane_a, dlq_a} <= set(on_two)
    assert [r.value for r in read_records(two, lane_a)] == [b"again"]
    letters = read_records(two, dlq_a)
    assert [r.value for r in letters] == [b"pill"]
    told = story.decode(letters[0].headers)
    assert told is not None
    assert (told.origin.topic, told.origin.offset) == (source_a, VALUES.index(b"pill"))
    # And the source group's offsets are on cluster one only (A's source is not on two)
    assert source_a not in on_two
    assert committed_offsets(one, route_a.group, source_a) == {0: len(VALUES)}
    # And the offline tools look where the route's topics are: its offsets on one, its DLQ on two
    view = moves.look(config, route_a)
    assert {p: c.offset for p, c in view.group.items()} == {0: len(VALUES)}
    assert view.extents == {0: (0, len(VALUES))}
    scope = open_scope(config, name_a)
    assert scope.client_conf["bootstrap.servers"] == second.bootstrap
    assert [r.value_head for r in list_letters(spark, scope, LetterFilter(), None)] == [b"pill"]
    # And the consumer was asked for "again" twice (RETRY, then ACK from the lane), B's records once
    calls = consumer.calls
    assert sorted(a for t, v, a in calls if v == b"again") == [1, 2]
    assert sorted(v for t, v, _ in calls if t == source_b) == [b"ok b0", b"ok b1"]
    assert sorted(v for t, v, _ in calls if t == source_a) == sorted((*VALUES, b"again"))
