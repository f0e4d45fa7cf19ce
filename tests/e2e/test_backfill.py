"""``siding backfill`` delivers exactly the range asked for, once, through the route's
dispatcher and DLQ, keeps the original delivery ids, writes an audit event, and goes on from
where an unfinished run stopped (docs/backfill.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from siding import naming
from siding.config import parse_config
from siding.consumer import ConsumerServer, Reply, ack, dead
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import config_text
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.kafka.reader import read_records
from siding.model import Delivery
from siding.pipeline.driver.backfill import run_backfill, state_path
from siding.pipeline.driver.backfill_range import State, parse_bound
from siding.routing import story
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RECORDS = 40
DEAD_AT = 15


def test_a_backfill_delivers_the_range_once_and_resumes_where_it_stopped(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
) -> None:
    # Given 40 records in partition 0 of a route's topic (the one at offset 15 is refused)
    topic = topic_name("bf")
    ensure_topics(admin_client({"bootstrap.servers": kafka.bootstrap}), [TopicSpec(topic)])
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=b"v", partition=0)
    assert producer.flush(10) == 0
    seen: list[str] = []

    async def handle(d: Delivery) -> Reply:
        seen.append(d.id)
        return dead("refused on purpose") if d.offset == DEAD_AT else ack()

    server = ConsumerServer(handle)
    loop_thread.run(server.start())
    name = "bf-" + topic[-8:]
    route = {
        "name": name,
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{server.target}",
        "dlq_flood_min_batch": 1_000_000,
    }
    config = parse_config(config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path / "cp"))
    start = parse_bound("0:10", single_topic=topic, now_ms=0, option="--from")
    end = parse_bound("0:30", single_topic=topic, now_ms=0, option="--to")
    try:
        # When a backfill of offsets 10..29 runs in chunks of 7
        first = run_backfill(config, name, start, end, per_chunk=7, spark=spark)
        delivered_first = list(seen)
        # And a second one of 20..25 finds an unfinished run that had done 20..22
        seen.clear()
        again_start = parse_bound("0:20", single_topic=topic, now_ms=0, option="--from")
        again_end = parse_bound("0:25", single_topic=topic, now_ms=0, option="--to")
        path = state_path(config, config.route[0])
        unfinished = State(
            ranges={(topic, 0): (20, 25)},
            done={(topic, 0): 23},
            counts={"records": 3, "acked": 3, "laned": 0, "dead": 0},
            started_at_ms=1,
            range_text="0:20..0:25",
        )
        path.replace(unfinished.to_json())
        resumed = run_backfill(config, name, again_start, again_end, spark=spark)
    finally:
        loop_thread.run(server.stop(0))

    # Then the consumer saw exactly offsets 10..29, once each, with the original delivery ids
    def offsets(ids: list[str]) -> list[int]:
        return sorted(int(i.rsplit("/", 1)[1]) for i in ids)

    assert all(i.startswith(f"{topic}/0/") for i in delivered_first + seen)
    assert offsets(delivered_first) == list(range(10, 30))
    assert first.counts == {"records": 20, "acked": 19, "laned": 0, "dead": 1}
    # And the dead one is in the route's DLQ, its story naming the original record
    letters = read_records(dict(config.kafka.client_config()), naming.route_dlq(config.route[0]))
    told = [story.decode(r.headers) for r in letters]
    assert [(s.origin.topic, s.origin.offset) for s in told if s] == [(topic, DEAD_AT)]
    # And the resumed run delivered only what the unfinished one had not: 23 and 24
    assert offsets(seen) == [23, 24]
    assert resumed.counts == {"records": 5, "acked": 5, "laned": 0, "dead": 0}
    assert not path.exists()
    # And each run wrote an audit event with its range and counts
    audit = read_records(dict(config.kafka.client_config()), naming.audit_topic(name))
    events = [json.loads(r.value or b"{}") for r in audit]
    assert [(e["command"], e["range"], e["status"], e["acked"], e["dead"]) for e in events] == [
        ("backfill", "0:10..0:30", "ok", 19, 1),
        ("backfill", "0:20..0:25", "ok", 5, 0),
    ]
