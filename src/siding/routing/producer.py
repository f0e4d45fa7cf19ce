"""The durable producer: idempotent, ``acks=all``; a write counts once Kafka acknowledged it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

from siding.errors import DurableWriteError
from siding.model import Headers


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers


def durable_producer_conf(client_conf: Mapping[str, object]) -> dict[str, object]:
    """The user's client settings plus what durability requires (those cannot be overridden)."""
    conf: dict[str, object] = {
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.timeout.ms": 60_000,
    }
    conf.update(client_conf)
    conf.update(
        {"acks": "all", "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}
    )
    return conf


class DurableProducer:
    """Writes records and ``flush``es them; any record Kafka did not acknowledge fails the batch."""

    def __init__(self, client_conf: Mapping[str, object]) -> None:
        self._producer: Producer | None = Producer(durable_producer_conf(client_conf))
        self._errors: list[str] = []

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise DurableWriteError("the producer is closed")
        return self._producer

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is left and let the client go (its threads stop with it)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(timeout_s)

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._errors.append(f"{message.topic()}: {error.str()}")

    def write(self, records: Sequence[OutRecord], timeout_s: float = 60.0) -> None:
        """Produce every record and wait until Kafka acknowledged all of them, or raise."""
        self._errors.clear()
        for record in records:
            while True:
                try:
                    self.producer.produce(
                        record.topic,
                        key=record.key,
                        value=record.value,
                        headers=list(record.headers),
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self.producer.poll(0.1)
        remaining = self.producer.flush(timeout_s)
        if remaining:
            raise DurableWriteError(f"{remaining} record(s) not acknowledged within {timeout_s:g}s")
        if self._errors:
            shown = "; ".join(self._errors[:3])
            raise DurableWriteError(f"{len(self._errors)} record(s) not written: {shown}")
