"""The contract's messages <-> the SDK's value types (pure)."""

from __future__ import annotations

from siding_consumer.model import Delivery, Output, Verdict
from siding_consumer.reply import Reply
from siding_consumer.v1 import consumer_pb2

CONSUMER_SERVICE = "siding.v1.Consumer"

VERDICT_TO_PROTO: dict[Verdict, consumer_pb2.Verdict.ValueType] = {
    Verdict.ACK: consumer_pb2.VERDICT_ACK,
    Verdict.RETRY: consumer_pb2.VERDICT_RETRY,
    Verdict.DEAD: consumer_pb2.VERDICT_DEAD,
}


def delivery_from_proto(message: consumer_pb2.Delivery) -> Delivery:
    return Delivery(
        id=message.id,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        # Optional fields: unset is how null (no key, a tombstone) travels.
        key=message.key if message.HasField("key") else None,
        value=message.value if message.HasField("value") else None,
        headers=tuple((h.key, h.value) for h in message.headers),
        timestamp_ms=message.timestamp_ms,
        attempt=message.attempt,
        lane=message.lane,
    )


def output_to_proto(output: Output) -> consumer_pb2.Output:
    message = consumer_pb2.Output(
        topic=output.topic,
        headers=[consumer_pb2.Header(key=k, value=v) for k, v in output.headers],
    )
    if output.key is not None:
        message.key = output.key
    if output.value is not None:
        message.value = output.value
    return message


def output_from_proto(message: consumer_pb2.Output) -> Output:
    return Output(
        topic=message.topic,
        key=message.key if message.HasField("key") else None,
        value=message.value if message.HasField("value") else None,
        headers=tuple((h.key, h.value) for h in message.headers),
    )


def reply_to_proto(reply: Reply, delivery_id: str) -> consumer_pb2.Result:
    message = consumer_pb2.Result(
        delivery_id=delivery_id,
        verdict=VERDICT_TO_PROTO[reply.verdict],
        reason=reply.reason,
        outputs=[output_to_proto(o) for o in reply.outputs],
    )
    if reply.retry_after_s is not None:
        message.retry_after_seconds = reply.retry_after_s
    return message
