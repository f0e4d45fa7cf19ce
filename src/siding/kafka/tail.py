"""Follow one single-partition topic from the beginning, reading what is new on each call."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from siding.kafka.admin import KafkaAdminError
from siding.kafka.reader import watermarks


class TopicTail:
    """A consumer that never joins a group; ``read_new`` returns (key, value) pairs up to the
    high watermark at call time, in log order."""

    def __init__(self, client_conf: Mapping[str, object], topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                **client_conf,
                "group.id": f"siding-tail-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                # The end is told by an event: compaction leaves gaps, so offsets cannot tell it.
                "enable.partition.eof": True,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._next = 0

    def read_new(self, timeout_s: float = 30.0) -> list[tuple[bytes, bytes | None]]:
        low, high = watermarks(self._consumer, self.topic, 0)
        # Compaction and retention may have removed everything before ``low``.
        self._next = max(self._next, low)
        out: list[tuple[bytes, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while self._next < high:
            if time.monotonic() > deadline:
                raise KafkaAdminError(f"reading {self.topic} did not finish within {timeout_s:g}s")
            message = self._consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # An end reached by an earlier call may still be queued: only this one's
                    # end (at least the high watermark read above) ends the read.
                    self._next = max(self._next, message.offset() or 0)
                    if self._next >= high:
                        break
                    continue
                raise KafkaAdminError(f"reading {self.topic}: {error.str()}")
            self._next = (message.offset() or 0) + 1
            key, value = message.key(), message.value()
            out.append(
                (
                    key.encode() if isinstance(key, str) else key or b"",
                    value.encode() if isinstance(value, str) else value,
                )
            )
        return out

    def close(self) -> None:
        self._consumer.close()
