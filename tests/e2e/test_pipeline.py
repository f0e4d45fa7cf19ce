"""The whole pipeline: real Kafka, real Spark (local), consumer services from `siding sim consumer`.

Each test states an invariant of DESIGN.md and checks it on what the consumer actually received
(its record file) and what Kafka actually holds (DLQ, lanes, group offsets).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from siding import naming
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import Behaviour, Fate, plan, read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.kafka.admin import admin_client, delete_topics
from siding.model import delivery_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SimFactory = Callable[..., Any]


def _ids(topic: str, count: int, partition: int = 0) -> set[str]:
    return {delivery_id(topic, partition, offset) for offset in range(count)}


def _route(topic: str, endpoint: str, **extra: object) -> dict[str, object]:
    route: dict[str, object] = {
        "name": topic.replace("_", "-")[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": endpoint,
        "max_in_flight": 200,
        "deadline": "5s",
        "lanes": [{"delay": "1s"}, {"delay": "2s"}],
        "dlq_flood_min_batch": 1_000_000,
    }
    route.update(extra)
    return route


def _run(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    route: dict[str, object],
    **kafka_client: object,
) -> PipelineRun:
    return PipelineRun.from_route(
        kafka.bootstrap,
        route,
        checkpoint_dir=tmp_path / "checkpoints",
        spark=spark,
        kafka_client=kafka_client,
    )


def test_every_message_delivered_and_group_offsets_match(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given 2,000 messages on one partition and a consumer that takes 200 ms per message
    count, latency_s, in_flight = 2000, 0.2, 200
    topic = topic_name("bulk")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(latency_s=(latency_s, latency_s))
    # When the pipeline runs with max_in_flight 200
    with _run(kafka, spark, tmp_path, _route(topic, f"grpc://{sim.target}")) as run:
        run.wait_committed({0: count}, timeout_s=180)
        # Then the group's committed offset is exactly what was processed
        assert run.committed() == {0: count}
    received = read_records(received_file)
    assert {r.delivery_id for r in received} == _ids(topic, count)
    span = max(r.received_s for r in received) - min(r.received_s for r in received)
    bound = in_flight / latency_s
    print(
        f"\nthroughput {count / max(span, 1e-9):.0f} msg/s over {span:.1f}s;"
        f" bound max_in_flight/latency = {bound:.0f} msg/s"
    )
    assert not run.dead_letters()


def test_poison_pills_go_to_the_dlq_with_their_story_and_others_are_unaffected(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a consumer that answers DEAD for 3 % of messages and RETRY forever for 2 %
    count = 400
    behaviour = {"dead_ratio": 0.03, "retry_ratio": 0.02, "latency_s": (0.0, 0.01)}
    topic = topic_name("poison")
    produce(kafka.bootstrap, topic, count, keys=4)
    sim, received_file = sim_consumer(**behaviour)
    model = Behaviour(**behaviour)  # type: ignore[arg-type]
    fates = {i: plan(model, i, 1).fate for i in _ids(topic, count)}
    dead = {i for i, f in fates.items() if f is Fate.DEAD}
    always_retry = {i for i, f in fates.items() if f is Fate.RETRY}
    assert dead and always_retry
    route = _route(topic, f"grpc://{sim.target}", lanes=[{"delay": "500ms"}, {"delay": "1s"}])
    with _run(kafka, spark, tmp_path, route) as run:
        run.wait_committed({0: count})
        wait_until(
            lambda: len(run.dead_letters()) >= len(dead | always_retry),
            timeout_s=60,
            what="every poison pill in the DLQ",
            check=run.check,
        )
        letters = run.dead_letters()
    # Then exactly the poison pills are in the DLQ, each telling its whole story
    by_id = {letter.story.origin.delivery_id: letter for letter in letters if letter.story}
    assert set(by_id) == dead | always_retry
    for did, letter in by_id.items():
        s = letter.story
        assert s is not None
        offset = int(did.rsplit("/", 1)[1])
        assert (s.origin.topic, s.origin.partition, s.origin.offset) == (topic, 0, offset)
        assert s.origin.timestamp_ms > 0 and s.died_at_ms is not None
        assert letter.key == f"k{offset % 4}".encode()
        assert ("sim-seq", str(offset).encode()) in letter.headers
        assert s.route == route["name"]
        if did in dead:
            assert s.attempt == 1 and [h.lane for h in s.hops] == [0]
            assert "dead" in s.reason.lower()  # the consumer's own reason
        else:  # retried in every lane, then given up
            assert s.attempt == 3 and [h.lane for h in s.hops] == [0, 1, 2]
            assert "exhausted" in s.reason
    # And every other message was delivered
    received = read_records(received_file)
    assert {r.delivery_id for r in received} == _ids(topic, count)
    attempts = defaultdict(set)
    for r in received:
        attempts[r.delivery_id].add(r.attempt)
    assert all(attempts[i] == {1, 2, 3} for i in always_retry)


def test_slow_message_moves_to_lane_1_and_is_acknowledged_there(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a consumer that takes 3 s for 5 % of messages and a main-lane deadline of 1 s
    count = 200
    topic = topic_name("slow")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(slow_ratio=0.05, slow_latency_s=3.0)
    route = _route(
        topic,
        f"grpc://{sim.target}",
        deadline="1s",
        lanes=[{"delay": "500ms", "deadline": "10s"}],
    )
    with _run(kafka, spark, tmp_path, route) as run:
        run.wait_committed({0: count})
        lane_topic = naming.lane_topic(route["name"], 1)  # type: ignore[arg-type]
        moved = wait_until(lambda: run.read_lane_topic(lane_topic), what="records in lane 1")
        wait_until(
            lambda: run.committed(lane_topic).get(0, 0) >= len(moved),
            what="lane 1 processed",
            check=run.check,
        )
        assert not run.dead_letters()
    received = read_records(received_file)
    slow = {letter.story.origin.delivery_id for letter in moved if letter.story}
    assert slow, "no message was slow enough to move"
    assert all("deadline" in (letter.story.reason if letter.story else "") for letter in moved)
    second = {r.delivery_id for r in received if r.attempt == 2}
    assert second == slow  # delivered again in lane 1 (and answered there, so nothing died)


def test_retry_retry_ack_passes_the_lanes_no_earlier_than_not_before(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a consumer that answers RETRY, RETRY, then ACK for 10 % of messages
    count = 200
    topic = topic_name("ladder")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(retry_ratio=0.1, retry_until_attempt=3)
    route = _route(topic, f"grpc://{sim.target}", lanes=[{"delay": "1s"}, {"delay": "2s"}])
    with _run(kafka, spark, tmp_path, route) as run:
        run.wait_committed({0: count})
        lanes = [naming.lane_topic(route["name"], k) for k in (1, 2)]  # type: ignore[arg-type]
        wait_until(
            lambda: all(run.committed(t).get(0, 0) > 0 for t in lanes),
            what="both lanes processed",
            check=run.check,
        )
        lane_records = [rec for t in lanes for rec in run.read_lane_topic(t)]
        ends = {t: len(run.read_lane_topic(t)) for t in lanes}
        wait_until(
            lambda: all(run.committed(t).get(0, 0) >= ends[t] for t in lanes),
            what="lanes fully processed",
            check=run.check,
        )
        assert not run.dead_letters()
    received = read_records(received_file)
    by_attempt = {(r.delivery_id, r.attempt): r for r in received}
    retried = {r.delivery_id for r in received if r.attempt == 3}
    assert retried and all((i, 2) in by_attempt and (i, 1) in by_attempt for i in retried)
    # Every delivery from a lane happened no earlier than the not-before time it carried
    for rec in lane_records:
        assert rec.story is not None
        got = by_attempt[(rec.story.origin.delivery_id, rec.story.attempt)]
        assert got.received_s * 1000 >= rec.story.not_before_ms - 1
    # And lane 2's delay is on top of lane 1's
    for i in retried:
        assert by_attempt[(i, 3)].received_s - by_attempt[(i, 1)].received_s >= 3.0 - 0.01


def test_key_mode_keeps_each_keys_order_even_through_retries(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given 300 messages over 6 keys, some answered RETRY once
    count, keys = 300, 6
    topic = topic_name("keyed")
    produce(kafka.bootstrap, topic, count, keys=keys)
    sim, received_file = sim_consumer(
        retry_ratio=0.05, retry_until_attempt=2, latency_s=(0.0, 0.02)
    )
    route = _route(topic, f"grpc://{sim.target}", ordering="key", lanes=[{"delay": "500ms"}])
    with _run(kafka, spark, tmp_path, route) as run:
        run.wait_committed({0: count})
        wait_until(
            lambda: (
                len({r.delivery_id for r in read_records(received_file)}) == count
                and run.totals.counts.acked >= count
            ),
            timeout_s=90,
            what="every message acknowledged",
            check=run.check,
        )
        assert not run.dead_letters()
    received = sorted(read_records(received_file), key=lambda r: r.received_s)
    assert any(r.attempt == 2 for r in received), "no message was retried"
    # Then per key the consumer saw sequence numbers in order: a retried message is delivered
    # again before any later message of its key
    per_key: dict[int, list[int]] = defaultdict(list)
    for r in received:
        assert r.seq is not None
        per_key[r.seq % keys].append(r.seq)
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), f"key k{key} out of order: {seqs}"


def test_endpoint_down_for_10s_dead_letters_nothing(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given traffic flowing to a consumer
    count = 600
    topic = topic_name("down")
    produce(kafka.bootstrap, topic, 100)
    sim, received_file = sim_consumer(latency_s=(0.0, 0.01))
    route = _route(topic, f"grpc://{sim.target}", deadline="2s", lanes=[{"delay": "1s"}])
    with _run(kafka, spark, tmp_path, route) as run:
        run.wait_committed({0: 100})
        # When the consumer goes away for 10 s (5 deadlines) while messages keep coming
        sim.stop()
        producer = threading.Thread(
            target=produce,
            args=(kafka.bootstrap, topic, count - 100),
            kwargs={"rate": 50.0, "start_seq": 100},  # 10 s of traffic
        )
        producer.start()
        time.sleep(10)  # the outage itself is the scenario, not a wait for a result
        down_offsets = run.committed()
        sim.start()
        producer.join()
        # Then everything is delivered after it returns, and nothing reached the DLQ
        run.wait_committed({0: count}, timeout_s=120)
        assert not run.dead_letters()
    assert down_offsets.get(0, 0) < count
    received = read_records(received_file)
    assert {r.delivery_id for r in received} == _ids(topic, count)


def test_unwritable_dlq_fails_the_batch_and_keeps_the_offset(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a route whose consumer dead-letters everything, and a DLQ topic that was deleted
    # on a broker that does not auto-create topics
    topic = topic_name("nodlq")
    produce(kafka.bootstrap, topic, 1)
    sim, _ = sim_consumer(dead_ratio=1.0)
    route = _route(topic, f"grpc://{sim.target}", dlq_flood_ratio=1.0)
    # (a short produce timeout, so the failing write is noticed in seconds, not a minute)
    with _run(kafka, spark, tmp_path, route, **{"message.timeout.ms": 3000}) as run:
        run.wait_committed({0: 1})
        delete_topics(admin_client(run.client_conf), [naming.route_dlq(run.route)])
        # When messages arrive that must go to the DLQ
        produce(kafka.bootstrap, topic, 5, start_seq=1)
        # Then the route stops with an error naming the route, and the offset stays put
        wait_until(lambda: run.error is not None, timeout_s=120, what="the route to fail")
        assert run.route.name in str(run.error)
        assert run.committed() == {0: 1}


@pytest.mark.parametrize("transport", ["http"])
def test_webhook_route_delivers(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
    transport: str,
) -> None:
    count = 100
    topic = topic_name("webhook")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(transport=transport, dead_ratio=0.05)
    with _run(kafka, spark, tmp_path, _route(topic, sim.url)) as run:
        run.wait_committed({0: count})
        wait_until(run.dead_letters, what="dead letters", check=run.check)
    assert {r.delivery_id for r in read_records(received_file)} == _ids(topic, count)


def test_a_garbled_record_in_a_retry_lane_is_dead_lettered_not_fatal(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a running route
    topic = topic_name("garbled")
    produce(kafka.bootstrap, topic, 10)
    sim, _ = sim_consumer()
    route = _route(topic, f"grpc://{sim.target}", lanes=[{"delay": "200ms"}])
    with _run(kafka, spark, tmp_path, route) as run:
        run.wait_committed({0: 10})
        # When something that is not siding's writes a record into its retry lane
        lane_topic = naming.lane_topic(run.route.name, 1)
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        producer.produce(lane_topic, key=b"k", value=b"\xff\x00not ours", headers=[("x", b"1")])
        assert producer.flush(10) == 0
        # Then it is dead-lettered with a reason, and the route keeps running
        letters = wait_until(
            run.dead_letters, what="the garbled record in the DLQ", check=run.check
        )
        wait_until(lambda: run.committed(lane_topic).get(0, 0) >= 1, what="lane 1 committed")
        assert run.error is None
    assert len(letters) == 1
    assert letters[0].value == b"\xff\x00not ours"
    assert letters[0].story is not None
    assert "without siding headers" in letters[0].story.reason
