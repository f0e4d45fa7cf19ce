"""Read a whole (small, compacted) topic from the beginning up to what exists now."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from siding.kafka.admin import KafkaAdminError, with_retries


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


RawHeaders = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None


def headers_of(raw: RawHeaders) -> tuple[tuple[str, bytes], ...]:
    pairs = raw.items() if isinstance(raw, Mapping) else (raw or ())
    return tuple((name, _bytes(value) or b"") for name, value in pairs)


def watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    def fetch() -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)

    return with_retries(fetch)


def watermarks_of(client_conf: Mapping[str, object], topic: str) -> dict[int, int]:
    """Partition -> high watermark (the next offset) of every partition of ``topic``."""
    consumer = Consumer({**client_conf, "group.id": f"siding-reader-{uuid.uuid4().hex}"})
    try:
        found = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if found is None or found.error is not None:
            return {}
        return {int(p): watermarks(consumer, topic, int(p))[1] for p in found.partitions}
    finally:
        consumer.close()


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

        def partitions() -> list[int]:
            found = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if found is None or (
                found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                raise KafkaAdminError(f"topic {topic} does not exist")
            if found.error is not None:  # e.g. LEADER_NOT_AVAILABLE right after creation
                raise KafkaException(found.error)
            return [int(p) for p in found.partitions]

        ends: dict[int, int] = {}
        for p in with_retries(partitions):
            low, high = watermarks(consumer, topic, p)
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
                if error.code() == KafkaError._PARTITION_EOF:
                    # also for a partition already read to its last record: no error
                    ends.pop(partition or 0, None)
                    continue
                raise KafkaAdminError(f"reading {topic}: {error.str()}")
            partition = partition or 0
            offset = message.offset() or 0
            _, timestamp = message.timestamp()
            key, value = _bytes(message.key()), _bytes(message.value())
            out.append(
                Record(partition, offset, key, value, headers_of(message.headers()), timestamp)
            )
            if partition in ends and offset + 1 >= ends[partition]:
                ends.pop(partition)
        return out
    finally:
        consumer.close()
