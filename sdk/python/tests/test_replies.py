"""Replies (pure): the builders, what exceptions and wrong returns mean, the wire form."""

from __future__ import annotations

import math

import pytest

from siding_consumer import DeadLetter, Output, Reply, Verdict, ack, backoff, dead, retry
from siding_consumer.reply import reply_for_exception, reply_for_return
from siding_consumer.v1 import consumer_pb2
from siding_consumer.wire import delivery_from_proto, reply_to_proto


def test_reply_builders() -> None:
    assert ack() == Reply(Verdict.ACK)
    assert retry(2.5, "busy") == Reply(Verdict.RETRY, 2.5, "busy")
    assert dead("poison") == Reply(Verdict.DEAD, None, "poison")
    assert backoff(3, "db down") == Reply(Verdict.RETRY, 3, "db down", backoff=True)
    assert backoff().reason == "consumer asked to back off"


@pytest.mark.parametrize("after", [-1, math.inf, math.nan])
@pytest.mark.parametrize("builder", [retry, backoff])
def test_a_retry_after_must_be_a_finite_number_of_seconds(builder: object, after: float) -> None:
    with pytest.raises(ValueError, match="after_s"):
        builder(after_s=after)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (DeadLetter("bad schema"), Reply(Verdict.DEAD, None, "bad schema")),
        (ValueError("db down"), Reply(Verdict.RETRY, None, "db down")),
        (KeyError(), Reply(Verdict.RETRY, None, "KeyError")),
    ],
)
def test_exceptions_become_replies(error: Exception, expected: Reply) -> None:
    assert reply_for_exception(error) == expected


def test_a_handler_returning_something_else_is_a_retry_not_an_ack() -> None:
    reply = reply_for_return(None)
    assert reply.verdict is Verdict.RETRY
    assert "NoneType" in reply.reason


def test_a_reply_on_the_wire() -> None:
    out = Output("billing.done", key=None, value=b"\x00\xff", headers=(("h", b"v"),))
    message = reply_to_proto(ack([out]), "t/0/1")
    assert message.delivery_id == "t/0/1"
    assert message.verdict == consumer_pb2.VERDICT_ACK
    assert not message.HasField("retry_after_seconds")
    [written] = message.outputs
    assert (written.topic, written.HasField("key"), written.value) == (
        "billing.done",
        False,
        out.value,
    )
    later = reply_to_proto(retry(0, "now"), "t/0/2")
    assert later.HasField("retry_after_seconds")  # zero is said, not dropped
    assert (later.verdict, later.reason) == (consumer_pb2.VERDICT_RETRY, "now")


def test_absent_and_empty_stay_distinct_from_the_wire() -> None:
    message = consumer_pb2.Delivery(id="t/0/1", topic="t", offset=1, attempt=2, lane=1)
    message.key = b""
    delivery = delivery_from_proto(message)
    assert (delivery.key, delivery.value) == (b"", None)
    assert (delivery.attempt, delivery.lane) == (2, 1)
