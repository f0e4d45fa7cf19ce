"""The plain serial consumer: poll one record, deliver it with a gRPC unary ``Deliver`` to the
same consumer service, commit synchronously, repeat (the pattern Kafka recommends)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import grpc
from confluent_kafka import Consumer, Message

from siding.model import delivery_id
from siding.v1 import consumer_pb2, consumer_pb2_grpc

_CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class SerialRun:
    processed: int
    seconds: float
    stopped_by_window: bool


def to_proto(message: Message) -> consumer_pb2.Delivery:
    """The record as siding's contract carries it, attempt 1 in the main lane."""
    topic, partition, offset = (
        message.topic() or "",
        message.partition() or 0,
        message.offset() or 0,
    )
    raw_headers = message.headers() or []
    headers = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    delivery = consumer_pb2.Delivery(
        id=delivery_id(topic, partition, offset),
        topic=topic,
        partition=partition,
        offset=offset,
        headers=[
            consumer_pb2.Header(key=k, value=v if isinstance(v, bytes) else str(v or "").encode())
            for k, v in headers
        ],
        timestamp_ms=message.timestamp()[1],
        attempt=1,
        lane=0,
    )
    key, value = message.key(), message.value()
    if key is not None:
        delivery.key = key if isinstance(key, bytes) else key.encode()
    if value is not None:
        delivery.value = value if isinstance(value, bytes) else value.encode()
    return delivery


def run_serial(
    bootstrap: str, topic: str, target: str, *, count: int, window_s: float
) -> SerialRun:
    """Consume until ``count`` records are done or ``window_s`` has passed since the first one."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"serial-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    channel = grpc.insecure_channel(target)
    stub = consumer_pb2_grpc.ConsumerStub(channel)
    processed, first, give_up = 0, None, time.monotonic() + window_s + 60
    try:
        consumer.subscribe([topic])
        while processed < count:
            now = time.monotonic()
            if (first is not None and now - first >= window_s) or now > give_up:
                break
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(f"serial consumer: {message.error()}")
            first = first if first is not None else time.monotonic()
            stub.Deliver(to_proto(message), timeout=_CALL_TIMEOUT_S)
            consumer.commit(message=message, asynchronous=False)
            processed += 1
    finally:
        consumer.close()
        channel.close()
    elapsed = time.monotonic() - first if first is not None else 0.0
    return SerialRun(processed, elapsed, processed < count)
