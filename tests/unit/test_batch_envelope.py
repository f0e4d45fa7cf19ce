"""The HTTP batch envelope and its answer (docs/batch.md): pure functions, tables and Hypothesis."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.consumer.batch import (
    BatchEnvelopeError,
    batch_answer,
    deliveries_from_batch,
    is_batch,
)
from siding.model import DeadClass, DeadKind, Delivery, Outcome, OutcomeKind, Result, Verdict
from siding.transport.batch_envelope import (
    NO_RESULT,
    SPLIT,
    UNBATCHED,
    batch_id,
    batch_outcomes,
    envelope,
    event,
    event_size,
    read_answer,
)
from siding.transport.signing import sign, verify

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()

CONSUMER = DeadClass(DeadKind.CONSUMER)


def delivery(n: int, **fields: Any) -> Delivery:
    values: dict[str, Any] = {"key": None, "value": b"v"} | fields
    return Delivery(f"orders/0/{n}", "orders", 0, n, **values)


def test_an_event_carries_every_fact_of_its_delivery() -> None:
    d = Delivery(
        "orders/3/42", "orders", 3, 42, key=b"customer-7", value=b"\x00\x01\x02\xff",
        headers=(("trace", b"abc"), ("content-type", b"application/json"), ("bin", b"\xff")),
        timestamp_ms=1_795_000_000_123, attempt=2, lane=1,
    )  # fmt: skip
    assert event(d) == {
        "specversion": "1.0",
        "id": "orders/3/42",
        "source": "kafka://orders",
        "type": "dev.siding.delivery",
        "time": "2026-11-18T11:06:40.123Z",
        "subject": "customer-7",
        "datacontenttype": "application/json",
        "data_base64": "AAEC/w==",
        "sidingkey": base64.b64encode(b"customer-7").decode(),
        "sidingattempt": 2,
        "sidinglane": 1,
        "sidingtopic": "orders",
        "sidingpartition": 3,
        "sidingoffset": 42,
        "sidingheaders": [
            {"key": "trace", "value_base64": "YWJj"},
            {"key": "content-type", "value_base64": base64.b64encode(b"application/json").decode()},
            {"key": "bin", "value_base64": "/w=="},
        ],
    }


@pytest.mark.parametrize(
    ("fields", "absent", "present"),
    [
        ({"value": None}, {"data", "data_base64"}, {}),  # a tombstone
        ({"value": b""}, {"data"}, {"data_base64": ""}),  # empty is not absent
        ({"key": None}, {"subject", "sidingkey"}, {}),
        ({"key": b""}, {"subject"}, {"sidingkey": ""}),
        ({"key": b" padded "}, {"subject"}, {"sidingkey": base64.b64encode(b" padded ").decode()}),
        ({"timestamp_ms": 0}, {"time"}, {}),
        (
            {"headers": (("content-type", b"\xff\xfe"),)},
            set(),
            {"datacontenttype": "application/octet-stream"},
        ),
        ({}, set(), {"datacontenttype": "application/octet-stream", "sidingheaders": []}),
    ],
)
def test_absent_and_odd_fields(
    fields: dict[str, Any], absent: set[str], present: dict[str, Any]
) -> None:
    built = event(delivery(1, **fields))
    assert absent.isdisjoint(built)
    assert {k: built[k] for k in present} == present


odd_bytes = st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=8), odd_bytes), max_size=4).map(tuple)
deliveries = st.builds(
    Delivery,
    id=st.text(min_size=1, max_size=20),
    topic=st.text(min_size=1, max_size=10),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    key=st.none() | odd_bytes,
    value=st.none() | odd_bytes,
    headers=headers,
    timestamp_ms=st.just(0) | st.integers(1, 4_102_444_800_000),
    attempt=st.integers(1, 100),
    lane=st.integers(0, 10),
)


@given(st.lists(deliveries, min_size=1, max_size=5))
def test_a_consumer_reads_back_every_delivery_byte_for_byte(batch: list[Delivery]) -> None:
    body = envelope(batch)
    assert deliveries_from_batch(body) == batch
    assert all(event_size(d) >= len(json.dumps(event(d))) // 2 for d in batch)


@given(st.lists(deliveries, min_size=1, max_size=5, unique_by=lambda d: d.id))
def test_a_consumers_answer_gives_each_delivery_its_own_verdict(batch: list[Delivery]) -> None:
    verdicts = [Verdict.ACK, Verdict.RETRY, Verdict.DEAD]
    results = [
        Result(d.id, verdicts[n % 3], 2.5 if n % 3 == 1 else None, f"r{n}")
        for n, d in enumerate(batch)
    ]
    outcomes = batch_outcomes(batch, 200, {}, batch_answer(reversed(results)))
    expected = [
        {
            Verdict.ACK: Outcome(OutcomeKind.ACK),
            Verdict.RETRY: Outcome(OutcomeKind.RETRY, r.reason, r.retry_after_s),
        }.get(r.verdict, Outcome(OutcomeKind.DEAD, r.reason, dead_class=CONSUMER))
        for r in results
    ]
    assert outcomes == expected


def test_the_batch_is_signed_over_its_raw_body() -> None:
    batch = [delivery(7), delivery(8)]
    body = envelope(batch)
    assert batch_id(batch) == "batch:orders/0/7:2"
    headers = {
        "webhook-id": batch_id(batch),
        "webhook-timestamp": "1795000000",
        "webhook-signature": sign(SECRET, batch_id(batch), 1_795_000_000, body),
    }
    assert verify(SECRET, headers, body, now_s=1_795_000_001) == "batch:orders/0/7:2"


BATCH = [delivery(1), delivery(2), delivery(3)]
ACK = Outcome(OutcomeKind.ACK)
MISSING = Outcome(OutcomeKind.RETRY, NO_RESULT)


def answer(*items: object) -> bytes:
    return json.dumps({"results": list(items)}).encode()


# (status, headers, body, the outcome of each of BATCH)
ANSWERS: list[tuple[int, dict[str, str], bytes, list[Outcome]]] = [
    (200, {}, b"", [ACK] * 3),
    (204, {}, b"", [ACK] * 3),
    (200, {}, b"ok", [ACK] * 3),
    (200, {}, b'{"status": "fine"}', [ACK] * 3),  # JSON, but no results: not a batch answer
    (200, {}, b'"ok"', [ACK] * 3),
    (
        200,
        {},
        answer(
            {"id": "orders/0/3", "verdict": "dead", "reason": "unknown currency XBT"},
            {"id": "orders/0/1", "verdict": "ack"},
            {"id": "orders/0/2", "verdict": "retry", "after": 30, "reason": "rate limited"},
        ),
        [
            ACK,
            Outcome(OutcomeKind.RETRY, "rate limited", 30.0),
            Outcome(OutcomeKind.DEAD, "unknown currency XBT", dead_class=CONSUMER),
        ],
    ),
    (  # missing, unknown verdict, duplicate (first wins), stranger, malformed items
        200,
        {},
        answer(
            {"id": "orders/0/1", "verdict": "ack"},
            {"id": "orders/0/1", "verdict": "dead"},
            {"id": "orders/0/2", "verdict": "maybe"},
            {"id": "orders/0/9", "verdict": "dead"},
            {"verdict": "dead"},
            "orders/0/3",
            {"id": 3, "verdict": "dead"},
        ),
        [ACK, Outcome(OutcomeKind.RETRY, f"{NO_RESULT} (unknown verdict 'maybe')"), MISSING],
    ),
    (
        200,
        {},
        answer(
            {"id": "orders/0/1", "verdict": "retry", "after": -1},
            {"id": "orders/0/2", "verdict": "retry", "after": True},
            {"id": "orders/0/3", "verdict": "dead"},
        ),
        [
            Outcome(OutcomeKind.RETRY, "consumer answered RETRY"),
            Outcome(OutcomeKind.RETRY, "consumer answered RETRY"),
            Outcome(OutcomeKind.DEAD, "consumer answered DEAD", dead_class=CONSUMER),
        ],
    ),
    (200, {}, answer(), [MISSING] * 3),
    (
        200,
        {},
        b'{"results": {"orders/0/1": "ack"}}',
        [Outcome(OutcomeKind.RETRY, "the batch answer's results is not a list")] * 3,
    ),
    (
        200,
        {},
        b'{"results": [',
        [Outcome(OutcomeKind.RETRY, 'the batch answer is not valid JSON: {"results": [')] * 3,
    ),
    (429, {"retry-after": "7"}, b"", [Outcome(OutcomeKind.BACKOFF, "http 429", 7.0)] * 3),
    (503, {}, b"", [Outcome(OutcomeKind.BACKOFF, "http 503")] * 3),
    (500, {}, b"", [Outcome(OutcomeKind.RETRY, "http 500")] * 3),
    (410, {}, b"", [Outcome(OutcomeKind.GONE, "http 410: endpoint gone")] * 3),
    (422, {}, b"", [SPLIT] * 3),
    (413, {}, b"", [SPLIT] * 3),
    (400, {}, b"", [SPLIT] * 3),
    (415, {}, b"", [UNBATCHED] * 3),
]


@pytest.mark.parametrize(("status", "headers", "body", "expected"), ANSWERS)
def test_every_kind_of_answer(
    status: int, headers: dict[str, str], body: bytes, expected: list[Outcome]
) -> None:
    assert batch_outcomes(BATCH, status, headers, body) == expected


def test_a_batch_of_one_refused_is_dead_with_its_reason() -> None:
    [alone] = batch_outcomes([delivery(1, value=b"x" * 10)], 413, {}, b"", excerpt="too big")
    assert alone == Outcome(
        OutcomeKind.DEAD,
        "http 413: message too large for the endpoint (10 bytes): too big",
        dead_class=DeadClass(DeadKind.TOO_LARGE),
    )
    [alone] = batch_outcomes([delivery(1)], 422, {}, b"", excerpt="bad currency")
    assert alone == Outcome(
        OutcomeKind.DEAD, "http 422: bad currency", dead_class=DeadClass.of_status("http 422")
    )
    assert batch_outcomes([delivery(1)], 415, {}, b"") == [UNBATCHED]


def test_an_answer_cut_short_is_never_taken_for_an_ack() -> None:
    assert read_answer(b'{"results": [{"id": "a", "verdict": "dead"}', complete=False) == (
        "the batch answer is too large to read"
    )
    assert read_answer(b"ok ok ok", complete=False) is None


def envelope_of(**fields: object) -> bytes:
    """A one-event batch: the required fields, then ``fields`` (None removes one)."""
    base: dict[str, object] = {"id": "t/0/1", "sidingtopic": "t", "sidingpartition": 0}
    base["sidingoffset"] = 1
    merged = {k: v for k, v in (base | fields).items() if v is not None}
    return json.dumps([merged]).encode()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"not json", "not JSON"),
        (b"{}", "not a JSON array"),
        (b"[1]", "event 0 is not a JSON object"),
        (envelope_of(id=None), "event 0: id is missing"),
        (envelope_of(sidingpartition="0"), "sidingpartition is not a int"),
        (envelope_of(data_base64="%%"), "data_base64 is not valid base64"),
        (envelope_of(sidingheaders=[{"key": "a"}]), "value_base64 is not a base64 string"),
        (envelope_of(time="yesterday"), "time is not RFC 3339"),
    ],
)
def test_a_body_that_is_not_an_envelope_is_refused_with_what_is_wrong(
    body: bytes, problem: str
) -> None:
    with pytest.raises(BatchEnvelopeError, match=problem):
        deliveries_from_batch(body)


@pytest.mark.parametrize(
    ("content_type", "batch"),
    [
        ("application/cloudevents-batch+json", True),
        ("Application/CloudEvents-Batch+JSON; charset=utf-8", True),
        ("application/cloudevents+json", False),
        ("application/octet-stream", False),
        (None, False),
    ],
)
def test_is_batch(content_type: str | None, batch: bool) -> None:
    assert is_batch(content_type) is batch


def test_the_answer_a_consumer_writes_is_the_documented_shape() -> None:
    body = batch_answer(
        [
            Result("orders/0/42", Verdict.ACK),
            Result("orders/0/43", Verdict.RETRY, 30, "rate limited"),
            Result("orders/0/44", Verdict.DEAD, None, "unknown currency XBT"),
        ]
    )
    assert json.loads(body) == {
        "results": [
            {"id": "orders/0/42", "verdict": "ack"},
            {
                "id": "orders/0/43",
                "verdict": "retry",
                "after": 30,
                "reason": "rate limited",
            },
            {"id": "orders/0/44", "verdict": "dead", "reason": "unknown currency XBT"},
        ]
    }
