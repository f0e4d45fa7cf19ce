"""The durable producer: idempotent, ``acks=all``; a write counts once Kafka acknowledged it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

from siding.errors import DurableWriteError, FenceLost
from siding.model import Headers


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    # None: the producer's partitioner chooses (by key).
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where Kafka put a record it acknowledged."""

    topic: str
    partition: int
    offset: int


MAX_RECORD_BYTES = 100 * 1024 * 1024


def durable_producer_conf(client_conf: Mapping[str, object]) -> dict[str, object]:
    """The user's client settings plus what durability requires (those cannot be overridden)."""
    conf: dict[str, object] = {
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.timeout.ms": 60_000,
        # Lane and DLQ records carry source records whole; the topic's own limit still applies.
        "message.max.bytes": MAX_RECORD_BYTES,
    }
    conf.update(client_conf)
    conf.update(
        {"acks": "all", "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}
    )
    return conf


def distinct(errors: Sequence[str], shown: int = 3) -> str:
    """Pure: the first ``shown`` distinct errors, each with how often it came (a write to a
    deleted topic fails every record the same way: one line, not one per record)."""
    counts = Counter(errors)
    parts = [f"{e} (x{n})" if n > 1 else e for e, n in list(counts.items())[:shown]]
    more = len(counts) - shown
    return "; ".join(parts) + (f"; and {more} other error(s)" if more > 0 else "")


DeliveryCallback = Callable[[KafkaError | None, Message], None]


class DurableProducer:
    """Writes records and ``flush``es them; any record Kafka did not acknowledge fails the batch."""

    def __init__(
        self,
        client_conf: Mapping[str, object],
        guard: Callable[[], str | None] | None = None,
    ) -> None:
        self._conf = durable_producer_conf(client_conf)
        self._producer: Producer | None = Producer(self._conf)
        # Why writes must be refused now (a fence lost), or None: asked before every write.
        self._guard = guard

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

    def write(self, records: Sequence[OutRecord], timeout_s: float = 60.0) -> None:
        """Produce every record and wait until Kafka acknowledged all of them, or raise.

        After a failed write the client is replaced: an idempotent producer can be left in a
        fatal state (e.g. out-of-order sequence) that no later write would get out of."""
        self._checked_write(records, timeout_s, None)

    def write_placed(
        self, records: Sequence[OutRecord], timeout_s: float = 60.0
    ) -> tuple[Placement | None, ...]:
        """``write``, and where each record went, in ``records``' order (``None`` if Kafka
        did not say: a record without an offset, as an idempotent write always has one)."""
        placed: list[Placement | None] = [None] * len(records)
        self._checked_write(records, timeout_s, placed)
        return tuple(placed)

    def _checked_write(
        self,
        records: Sequence[OutRecord],
        timeout_s: float,
        placed: list[Placement | None] | None,
    ) -> None:
        refused = self._guard() if self._guard is not None else None
        if refused is not None:
            raise FenceLost(refused)
        errors: list[str] = []  # per call: writes from several threads never mix their errors

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(f"{message.topic()}: {error.str()}")

        def placing(index: int) -> DeliveryCallback:
            def on_placed(error: KafkaError | None, message: Message) -> None:
                on_delivery(error, message)
                offset, partition = message.offset(), message.partition()
                if placed is not None and error is None and offset is not None and offset >= 0:
                    placed[index] = Placement(str(message.topic()), int(partition or 0), offset)

            return on_placed

        callbacks = [placing(i) for i in range(len(records))] if placed is not None else None
        try:
            self._write(records, callbacks or on_delivery, timeout_s)
        except DurableWriteError:
            self._replace()
            raise
        if errors:
            self._replace()
            raise DurableWriteError(f"{len(errors)} record(s) not written: {distinct(errors)}")

    def _write(
        self,
        records: Sequence[OutRecord],
        on_delivery: DeliveryCallback | Sequence[DeliveryCallback],
        timeout_s: float,
    ) -> None:
        for index, record in enumerate(records):
            callback = on_delivery if callable(on_delivery) else on_delivery[index]
            while True:
                try:
                    self.producer.produce(
                        record.topic,
                        key=record.key,
                        value=record.value,
                        headers=list(record.headers),
                        on_delivery=callback,
                        partition=_placed(record),
                    )
                    break
                except BufferError:
                    self.producer.poll(0.1)
        remaining = self.producer.flush(timeout_s)
        if remaining:
            raise DurableWriteError(f"{remaining} record(s) not acknowledged within {timeout_s:g}s")

    def _replace(self) -> None:
        old, self._producer = self._producer, Producer(self._conf)
        if old is not None:
            old.purge()
            old.flush(0)


def _placed(record: OutRecord) -> int:
    """The ``partition`` argument of a record placed by its writer; -1 (librdkafka's
    ``RD_KAFKA_PARTITION_UA``): the partitioner chooses, by key."""
    return -1 if record.partition is None else record.partition
