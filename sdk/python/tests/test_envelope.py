"""Webhook requests read as deliveries, and replies written as answers (docs/webhooks.md,
docs/batch.md), as pure functions."""

from __future__ import annotations

import json

import pytest

from siding_consumer import Delivery, Output, ack, backoff, dead, retry
from siding_consumer.envelope import (
    EnvelopeError,
    batch_answer,
    deliveries_from_batch,
    delivery_from_request,
    is_batch,
    single_answer,
)

# The example of docs/batch.md, and a tombstone without a key.
BATCH = b"""[
  {"specversion": "1.0", "id": "orders/0/42", "source": "kafka://orders",
   "type": "dev.siding.delivery", "time": "2026-11-23T10:00:00.000Z", "subject": "customer-7",
   "datacontenttype": "application/octet-stream", "data_base64": "AAEC/w==",
   "sidingkey": "Y3VzdG9tZXItNw==", "sidingattempt": 1, "sidinglane": 0,
   "sidingtopic": "orders", "sidingpartition": 0, "sidingoffset": 42,
   "sidingheaders": [{"key": "trace", "value_base64": "YWJj"}]},
  {"specversion": "1.0", "id": "orders/1/7", "source": "kafka://orders",
   "type": "dev.siding.delivery", "sidingattempt": 3, "sidinglane": 2,
   "sidingtopic": "orders", "sidingpartition": 1, "sidingoffset": 7, "sidingheaders": []}
]"""


def _one(**fields: object) -> bytes:
    """A one-event batch with the fields siding always sends, and ``fields``."""
    event = {"id": "t/0/1", "sidingtopic": "t", "sidingpartition": 0, "sidingoffset": 1}
    return json.dumps([event | fields]).encode()


def test_a_batch_reads_as_its_deliveries() -> None:
    first, tombstone = deliveries_from_batch(BATCH)
    assert first == Delivery(
        id="orders/0/42",
        topic="orders",
        partition=0,
        offset=42,
        key=b"customer-7",
        value=b"\x00\x01\x02\xff",
        headers=(("trace", b"abc"),),
        timestamp_ms=1_795_428_000_000,
        attempt=1,
        lane=0,
    )
    assert (tombstone.key, tombstone.value, tombstone.timestamp_ms) == (None, None, 0)
    assert (tombstone.attempt, tombstone.lane, tombstone.partition) == (3, 2, 1)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"{", "not JSON"),
        (b"{}", "not a JSON array"),
        (b"[1]", "event 0 is not a JSON object"),
        (b'[{"id": ""}, {"sidingtopic": "t"}]', "event 0: sidingtopic is missing"),
        (b'[{"id": "t/0/1", "sidingtopic": "t", "sidingpartition": 0}]', "sidingoffset is missing"),
        (_one(sidingoffset="7"), "event 0: sidingoffset is not a int"),
        (_one(data_base64="%%"), "event 0: data_base64 is not valid base64"),
        (_one(sidingheaders=[{"k": 1}]), r"sidingheaders\[0\] is not \{key, value_base64\}"),
        (_one(sidingheaders=[{"key": "a"}]), "value_base64 is not a base64 string"),
        (_one(time="yesterday"), "event 0: time is not RFC 3339"),
    ],
)
def test_a_bad_batch_is_an_error_naming_the_field(body: bytes, names: str) -> None:
    with pytest.raises(EnvelopeError, match=names):
        deliveries_from_batch(body)


def test_text_data_of_a_hand_made_event_is_taken_as_utf8() -> None:
    [delivery] = deliveries_from_batch(_one(data="héllo"))
    assert delivery.value == "héllo".encode()


def test_a_single_request_reads_as_its_delivery() -> None:
    headers = {
        "Content-Type": "application/json",
        "ce-id": "trips/3/9",
        "ce-time": "2026-11-23T10:00:00.250Z",
        "siding-key": "AP8=",
        "siding-topic": "trips",
        "siding-partition": "3",
        "siding-offset": "9",
        "siding-attempt": "2",
        "siding-lane": "1",
        "webhook-id": "trips/3/9",
        "user-agent": "siding",
        "traceparent": "00-abc",
    }
    delivery = delivery_from_request(headers, b"\x00\xff")
    assert delivery == Delivery(
        id="trips/3/9",
        topic="trips",
        partition=3,
        offset=9,
        key=b"\x00\xff",
        value=b"\x00\xff",
        headers=(("traceparent", b"00-abc"), ("content-type", b"application/json")),
        timestamp_ms=1_795_428_000_250,
        attempt=2,
        lane=1,
    )
    assert delivery_from_request({"ce-id": "a/0/1", "ce-subject": "k"}, b"").key == b"k"
    with pytest.raises(EnvelopeError, match="siding-attempt"):
        delivery_from_request({"ce-id": "a/0/1", "siding-attempt": "x"}, b"")


def test_sidings_idempotency_key_is_not_a_kafka_header_but_a_producers_own_is() -> None:
    ours = {"ce-id": "t/0/1", "Idempotency-Key": "t/0/1", "X-Team": "billing"}
    theirs = {"ce-id": "t/0/1", "Idempotency-Key": "pay-77"}

    assert delivery_from_request(ours, b"").headers == (("X-Team", b"billing"),)
    assert delivery_from_request(theirs, b"").headers == (("Idempotency-Key", b"pay-77"),)


def test_content_types() -> None:
    assert is_batch("application/cloudevents-batch+json; charset=utf-8")
    assert not is_batch("application/octet-stream")
    assert not is_batch(None)


def test_single_answers() -> None:
    assert single_answer(ack()).status == 200
    assert single_answer(retry(30, "busy")).status == 500
    assert (single_answer(dead("bad")).status, single_answer(dead("bad")).body) == (422, b"bad")
    pause = single_answer(backoff(2.5, "db down"))
    assert pause.status == 429
    assert ("retry-after", "3") in pause.headers
    # an ack with outputs carries them in a JSON body (docs/outputs.md)
    produced = single_answer(ack([Output("t", key=b"\x00", value=b"\xff", headers=(("h", b""),))]))
    assert (produced.status, ("content-type", "application/json") in produced.headers) == (
        200,
        True,
    )
    assert json.loads(produced.body) == {
        "outputs": [
            {
                "topic": "t",
                "key_base64": "AA==",
                "value_base64": "/w==",
                "headers": [{"key": "h", "value_base64": ""}],
            }
        ]
    }


def test_a_batch_answer_gives_one_result_per_delivery() -> None:
    answer = batch_answer(
        [
            ("a/0/1", ack()),
            ("a/0/2", retry(30, "later")),
            ("a/0/3", dead("bad")),
            ("a/0/4", backoff()),
            ("a/0/5", ack([Output("t")])),
        ]
    )
    assert answer.status == 200
    assert json.loads(answer.body) == {
        "results": [
            {"id": "a/0/1", "verdict": "ack"},
            {"id": "a/0/2", "verdict": "retry", "after": 30, "reason": "later"},
            {"id": "a/0/3", "verdict": "dead", "reason": "bad"},
            {"id": "a/0/4", "verdict": "retry", "reason": "consumer asked to back off"},
            {"id": "a/0/5", "verdict": "ack", "outputs": [{"topic": "t"}]},
        ]
    }


def test_a_batch_where_every_delivery_backs_off_is_answered_429() -> None:
    answer = batch_answer([("a/0/1", backoff(1)), ("a/0/2", backoff(4))])
    assert answer.status == 429
    assert ("retry-after", "4") in answer.headers
