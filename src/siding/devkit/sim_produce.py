"""A load producer for tests, demos and benchmarks (``siding sim produce``).

Every message carries ``sim-seq`` (its sequence number) and ``sim-produced-at`` (unix
seconds, as text) so a simulated consumer's record can measure end-to-end latency and loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from siding.errors import BrokerError

SEQ_HEADER = "sim-seq"
PRODUCED_AT_HEADER = "sim-produced-at"
_FLUSH_TIMEOUT_S = 30.0


def message_key(seq: int, keys: int | None) -> bytes | None:
    """``k0 .. k{keys-1}`` round-robin over the sequence; no key without ``keys``."""
    if keys is None:
        return None
    if keys < 1:
        raise ValueError("keys must be at least 1")
    return f"k{seq % keys}".encode()


def message_headers(seq: int, produced_at_s: float) -> list[tuple[str, bytes]]:
    return [
        (SEQ_HEADER, str(seq).encode()),
        (PRODUCED_AT_HEADER, f"{produced_at_s:.6f}".encode()),
    ]


def message_value(seq: int) -> bytes:
    return f'{{"seq": {seq}}}'.encode()


def due_time(start_s: float, index: int, rate: float | None) -> float:
    """When message ``index`` is due at ``rate`` msgs/s (``None``: as fast as possible)."""
    return start_s if not rate else start_s + index / rate


def wait_for(
    due_s: float, poll: Callable[[float], object], clock: Callable[[], float] = time.monotonic
) -> None:
    """Serve the producer's callbacks until ``due_s`` (``clock`` time). ``poll`` returns as soon
    as it served one (a delivery report), long before its timeout at a steady rate: polling
    once would send the next message early, and the rate asked for would not be the rate."""
    while (wait := due_s - clock()) > 0:
        poll(wait)


def new_producer(bootstrap: str, config: Mapping[str, str | int] | None = None) -> Any:
    """The producer ``produce`` uses: idempotent, acks=all, 5 ms linger."""
    from confluent_kafka import Producer

    return Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
        | dict(config or {})
    )


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    keys: int | None = None,
    rate: float | None = None,
    partitions: int = 1,
    start_seq: int = 0,
    config: Mapping[str, str | int] | None = None,
    producer: Any = None,
) -> int:
    """Produce ``count`` messages (seq ``start_seq``..), creating the topic if missing; flush
    and return how many Kafka acknowledged. Raises ``BrokerError`` if any was not.

    ``producer``: a ``new_producer`` to reuse. One that has already delivered a message is
    connected and has its idempotence id, so the first messages of a timed run do not wait for
    that (their produce timestamps would count the wait as latency).
    """
    from siding.kafka.admin import TopicSpec, admin_client, ensure_topics

    # The producer's settings hold the security ones too (a secured cluster): the admin needs them.
    admin_conf = {k: str(v) for k, v in (config or {}).items()}
    admin = admin_client({**admin_conf, "bootstrap.servers": bootstrap})
    ensure_topics(admin, [TopicSpec(topic, partitions)])
    if producer is None:
        producer = new_producer(bootstrap, config)
    failures: list[str] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    start = time.monotonic()
    for index in range(count):
        wait_for(due_time(start, index, rate), producer.poll)
        seq = start_seq + index
        headers: list[tuple[str, str | bytes | None]] = list(message_headers(seq, time.time()))
        while True:
            try:
                producer.produce(
                    topic,
                    value=message_value(seq),
                    key=message_key(seq, keys),
                    headers=headers,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain
        producer.poll(0)
    left = producer.flush(_FLUSH_TIMEOUT_S)
    if left or failures:
        raise BrokerError(
            f"{left + len(failures)} of {count} messages not acknowledged"
            + (f"; first error: {failures[0]}" if failures else "")
        )
    return count
