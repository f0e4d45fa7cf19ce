"""Read a whole (small, compacted) topic from the beginning up to what exists now."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from siding.kafka.admin import KafkaAdminError, with_retries


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def read_to_end(
    client_conf: Mapping[str, object], topic: str, timeout_s: float = 60.0
) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) of ``topic`` up to the high watermarks at call time."""
    return [(r.key or b"", r.value) for r in read_records(client_conf, topic, timeout_s)]


def read_records(
    client_conf: Mapping[str, object], topic: str, timeout_s: float = 60.0
) -> list[Record]:
    """Every record of ``topic`` up to the high watermarks at call time, in log order per
    partition. The topic must exist."""
    consumer = Consumer(
        {
            **client_conf,
            "group.id": f"siding-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise KafkaAdminError(f"topic {topic} does not exist")
        ends: dict[int, int] = {}
        for p in metadata.topics[topic].partitions:
            low, high = with_retries(
                lambda p=p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            )
            if high > low:
                ends[p] = high
        if not ends:
            return []
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise KafkaAdminError(f"reading {topic} did not finish within {timeout_s:g}s")
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            partition = message.partition()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and partition in ends:
                    ends.pop(partition)
                    continue
                raise KafkaAdminError(f"reading {topic}: {error.str()}")
            offset = message.offset() or 0
            headers = tuple((k, v or b"") for k, v in (message.headers() or []))
            _, timestamp = message.timestamp()
            out.append(Record(partition, offset, message.key(), message.value(), headers, timestamp))
            if partition in ends and offset + 1 >= ends[partition]:
                ends.pop(partition)
        return out
    finally:
        consumer.close()
