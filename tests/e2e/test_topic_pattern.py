"""A route with ``topic_pattern`` reads every topic whose name matches, including one created
while it runs; each topic's group offsets are committed, and a dead letter from each names its
own origin topic (docs/configuration.md, "Source topics")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from siding.consumer import ConsumerServer, Reply, ack, dead
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.model import Delivery
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _produce(bootstrap: str, topic: str) -> None:
    """Two records in partition 0: ``ok`` (offset 0), acked; ``dead`` (offset 1), dead-lettered."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for key in (b"ok", b"dead"):
        producer.produce(topic, key=key, value=topic.encode(), partition=0)
    assert producer.flush(10) == 0


def test_a_pattern_route_reads_matching_topics_and_one_created_while_it_runs(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
) -> None:
    # Given two topics matching the pattern (one with 2 partitions), one that does not match
    prefix = topic_name("pat")
    first, second, later, other = (f"{prefix}-{s}" for s in ("a", "b", "c", "x"))
    admin = admin_client({"bootstrap.servers": kafka.bootstrap})
    ensure_topics(admin, [TopicSpec(first), TopicSpec(second, 2), TopicSpec(other)])
    for topic in (first, second, other):
        _produce(kafka.bootstrap, topic)
    seen: list[tuple[str, str]] = []

    async def handle(d: Delivery) -> Reply:
        key = (d.key or b"").decode()
        seen.append((d.topic, key))
        return dead("dead on purpose") if key == "dead" else ack()

    server = ConsumerServer(handle)
    loop_thread.run(server.start())
    route = {
        "name": "pattern-" + prefix[-8:],
        "topic_pattern": f"{prefix}-[abc]",
        "group": f"{prefix}-group",
        "endpoint": f"grpc://{server.target}",
        "deadline": "5s",
        "dlq_flood_min_batch": 1_000_000,
    }
    try:
        run = PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "checkpoints", spark=spark
        )
        with run:
            # When the route has read both topics
            def origins() -> set[str]:
                return {letter.story.origin.topic for letter in run.dead_letters() if letter.story}

            wait_until(
                lambda: {first, second} <= origins(),
                timeout_s=90,
                what="a dead letter from each of the first two topics",
                check=run.check,
            )
            # And a third matching topic is created while it runs
            ensure_topics(admin, [TopicSpec(later)])
            _produce(kafka.bootstrap, later)
            wait_until(
                lambda: later in origins(),
                timeout_s=90,
                what="a dead letter from the topic created while the route runs",
                check=run.check,
            )
            for topic in (first, second, later):
                wait_until(
                    lambda t=topic: sum(run.committed(t).values()) >= 2,  # type: ignore[misc]
                    timeout_s=60,
                    what=f"the group's offsets of {topic}",
                    check=run.check,
                )
            letters = run.dead_letters()
            committed = {t: run.committed(t) for t in (first, second, later, other)}
    finally:
        loop_thread.run(server.stop(0))
    # Then every record of the matching topics was delivered once, none of the other topic
    assert Counter(seen) == Counter(
        (t, key) for t in (first, second, later) for key in ("ok", "dead")
    )
    # And each dead letter names its origin topic and offset, and the route
    told = sorted(
        (s.origin.topic, s.origin.offset, s.route) for s in (x.story for x in letters) if s
    )
    assert told == [(t, 1, route["name"]) for t in sorted((first, second, later))]
    assert all(
        letter.value == letter.story.origin.topic.encode() for letter in letters if letter.story
    )
    # And the group committed each matching topic's offsets, the other topic's not at all
    assert sum(committed[first].values()) == sum(committed[second].values()) == 2
    assert sum(committed[later].values()) == 2
    assert committed[other] == {}
