"""How far a topic's partitions reach now, and which offset a time falls on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from confluent_kafka import Consumer, TopicPartition

from siding.kafka.admin import KafkaAdminError, with_retries
from siding.kafka.reader import watermarks


@contextmanager
def _consumer(client_conf: Mapping[str, object]) -> Iterator[Consumer]:
    consumer = Consumer(
        {
            **client_conf,
            "group.id": f"siding-extent-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        yield consumer
    finally:
        consumer.close()


def extents(client_conf: Mapping[str, object], topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (log start, log end) of every partition of ``topic``; the topic must exist."""
    with _consumer(client_conf) as consumer:
        found = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if found is None or found.error is not None:
            raise KafkaAdminError(f"topic {topic} does not exist")
        return {int(p): watermarks(consumer, topic, int(p)) for p in sorted(found.partitions)}


def offsets_at(
    client_conf: Mapping[str, object], topic: str, partitions: list[int], at_ms: int
) -> dict[int, int | None]:
    """Partition -> the first offset whose timestamp is at or after ``at_ms``; ``None`` where no
    record is that late (the caller decides: Kafka's own tool takes the log end)."""
    with _consumer(client_conf) as consumer:

        def fetch() -> dict[int, int | None]:
            asked = [TopicPartition(topic, p, at_ms) for p in partitions]
            answer = consumer.offsets_for_times(asked, timeout=10)
            for tp in answer:
                if tp.error is not None:
                    raise KafkaAdminError(f"cannot look up offsets by time on {topic}: {tp.error}")
            return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in answer}

        return with_retries(fetch)
