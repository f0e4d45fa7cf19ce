"""The driver follows a route's settled topic on a real broker: only what is new, tombstones too."""

from __future__ import annotations

import time
from collections.abc import Callable

from siding.devkit.broker import EmbeddedKafka
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.kafka.tail import TopicTail
from siding.model import Outcome, OutcomeKind
from siding.pipeline.driver.settlements import SettlementStore
from siding.routing import settlement
from siding.routing.producer import DurableProducer
from siding.routing.settlement import Settlement

COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}


def test_the_store_reads_new_settlements_and_forgets_with_tombstones(
    kafka: EmbeddedKafka, topic_name: Callable[[str], str]
) -> None:
    # Given a compacted settled topic with two settlements
    conf = {"bootstrap.servers": kafka.bootstrap}
    topic = topic_name("settled")
    ensure_topics(admin_client(conf), [TopicSpec(topic, 1, COMPACTED)])
    producer = DurableProducer(conf)
    try:
        write = producer.write
        ack, dead = Outcome(OutcomeKind.ACK), Outcome(OutcomeKind.DEAD, "bad")
        now_ms = int(time.time() * 1000)
        write([settlement.settlement_record(topic, Settlement(t, ack, now_ms)) for t in "ab"])
        tail = TopicTail(conf, topic)
        try:
            store = SettlementStore(topic, tail.read_new, write)
            # When the store catches up, then again after one more and a forget
            store.catch_up()
            assert set(store.snapshot()) == {"a", "b"}
            assert tail.read_new() == []  # nothing new: returns at once
            write([settlement.settlement_record(topic, Settlement("c", dead, now_ms))])
            store.forget(["a"])
            store.catch_up()
            # Then it holds what the topic says now
            assert set(store.snapshot()) == {"b", "c"}
            assert store.of(["c"])["c"].outcome == dead
            # And a second follower from the beginning agrees (the tombstone is in the log)
            other = TopicTail(conf, topic)
            try:
                again = SettlementStore(topic, other.read_new, write)
                again.catch_up()
                assert set(again.snapshot()) == {"b", "c"}
            finally:
                other.close()
        finally:
            tail.close()
    finally:
        producer.close()
