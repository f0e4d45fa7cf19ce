"""One record too large for the consumer's transport must not stop a route (issue 18's second case):
it is dead-lettered with its size, everything after it is delivered, and offsets move past it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import read_records
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.model import delivery_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SimFactory = Callable[..., Any]
BIG = 6 * 1024 * 1024


@pytest.mark.parametrize(
    ("transport", "kind"), [("grpc", "stream"), ("grpc", "unary"), ("http", None)]
)
def test_a_6_mib_record_is_dead_lettered_with_its_size_and_the_route_moves_on(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
    transport: str,
    kind: str | None,
) -> None:
    # Given a topic that allows 10 MB and 300 small records with one of 6 MiB among them
    topic = topic_name(f"big-{kind or transport}")
    limit = str(10 * 1024 * 1024)
    conf = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(conf), [TopicSpec(topic, 1, {"max.message.bytes": limit})])
    producer = Producer({**conf, "message.max.bytes": int(limit) + 1024})
    for n in range(300):
        producer.produce(topic, key=str(n).encode(), value=b"x" * (BIG if n == 150 else 100))
    assert producer.flush(60) == 0
    sim, received_file = sim_consumer(transport)
    route: dict[str, Any] = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}" if transport == "grpc" else sim.url,
        "dlq_flood_min_batch": 1_000_000,
    }
    if kind is not None:
        route["transport"] = kind
    # When the pipeline runs with the default limit: gRPC's own 4 MiB (the record is not sent);
    # none for HTTP (the consumer, an aiohttp server with its default 1 MiB body limit, says 413)
    with PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
    ) as run:
        run.wait_committed({0: 300}, timeout_s=120)
        wait_until(lambda: len(run.dead_letters()) == 1, timeout_s=60, check=run.check)
        (letter,) = run.dead_letters()
    # Then the big one is in the DLQ, whole, with a reason naming its size; the rest arrived
    assert letter.story is not None
    assert letter.story.origin.delivery_id == delivery_id(topic, 0, 150)
    assert "too large" in letter.story.reason
    assert re.search(r"\b\d{7} bytes", letter.story.reason), letter.story.reason  # its size
    if transport == "grpc":
        assert "max_message_bytes" in letter.story.reason
    assert letter.value is not None and len(letter.value) == BIG
    received = {r.delivery_id for r in read_records(received_file)}
    assert received == {delivery_id(topic, 0, n) for n in range(300) if n != 150}
