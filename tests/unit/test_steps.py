"""A record's steps: counted in one type; dead letters classed where their reason is made, and
letters and settlements written before the class was kept classed by their text, as before."""

from __future__ import annotations

import dataclasses
import json

import grpc
import pytest

from siding.model import (
    DeadClass,
    DeadKind,
    Delivery,
    Outcome,
    OutcomeKind,
    Output,
    Result,
    Verdict,
)
from siding.pipeline.executor.rows import Incoming
from siding.pipeline.executor.task import screen
from siding.policy import next_step
from siding.routing import settlement, story
from siding.routing.records import dlq_record
from siding.steps import (
    Done,
    Held,
    Parked,
    Resent,
    Step,
    StepCounts,
    ToDlq,
    ToLane,
    legacy_class,
    reason_class,
)
from siding.transport.outcomes import (
    outcome_from_grpc,
    outcome_from_http,
    outcome_from_result,
    too_large,
)

NOW = 1_750_000_000_000
DELIVERY = Delivery(
    id="orders/0/7",
    topic="orders",
    partition=0,
    offset=7,
    key=b"k",
    value=b"v",
    headers=(),
    timestamp_ms=NOW,
)


def test_steps_are_counted_by_kind_and_a_resent_record_is_not_settled() -> None:
    steps: list[Step] = [
        Done((Output("t", b"k", b"v"), Output("t", None, b"w"))),
        Done(),
        ToLane(1, 2, NOW, "r"),
        ToDlq("x"),
        Parked("t1", NOW),
        Held("following orders/0/6"),
        Resent(NOW),
    ]
    counts = StepCounts.of(steps)
    assert counts == StepCounts(
        records=6, acked=2, to_lane=1, to_dlq=1, parked=1, held=1, outputs=2
    )


def test_counts_add_up_field_by_field() -> None:
    a = StepCounts(records=3, acked=2, to_dlq=1, outputs=4)
    b = StepCounts(records=2, to_lane=1, parked=1, held=0, outputs=1)
    assert a + b == StepCounts(records=5, acked=2, to_lane=1, to_dlq=1, parked=1, outputs=5)
    assert StepCounts.total([a, b, b]) == a + b + b
    assert StepCounts.total([]) == StepCounts()


@pytest.mark.parametrize(
    ("outcome", "label"),
    [
        (outcome_from_http(422), "http 422"),
        (outcome_from_http(413), "too large"),
        (outcome_from_grpc(grpc.StatusCode.INVALID_ARGUMENT, "bad field"), "grpc INVALID_ARGUMENT"),
        (too_large("Received message larger than max (9 vs. 4)"), "too large"),
        # The consumer's own words never pick the class, even when they look like siding's.
        (
            outcome_from_result(Result("x", Verdict.DEAD, None, "retries exhausted in db")),
            "consumer said dead",
        ),
        (
            outcome_from_result(Result("x", Verdict.DEAD, None, "http 404: no such user")),
            "consumer said dead",
        ),
    ],
)
def test_a_dead_answer_carries_its_class_from_the_transport(outcome: Outcome, label: str) -> None:
    step = next_step(outcome, 1, (), NOW, max_retry_after_s=0)
    assert isinstance(step, ToDlq)
    assert reason_class(step.reason, step.dead_class) == label


def test_siding_classes_the_reasons_it_makes_itself() -> None:
    retry = Outcome(OutcomeKind.RETRY, "http 500")
    exhausted = next_step(retry, 1, (), NOW, max_retry_after_s=0)
    assert exhausted == ToDlq(
        "retries exhausted after 1 attempt: http 500", DeadClass(DeadKind.RETRIES_EXHAUSTED)
    )
    big = Incoming(dataclasses.replace(DELIVERY, value=b"x" * 5000))
    [screened] = screen([big], 1024)
    assert screened.dead_letter.dead_class == DeadClass(DeadKind.TOO_LARGE)
    assert Incoming(DELIVERY, malformed="garbled").dead_letter.dead_class == DeadClass(
        DeadKind.MALFORMED
    )


@pytest.mark.parametrize(
    "dead_class",
    [
        *(DeadClass(k) for k in DeadKind if k is not DeadKind.STATUS),
        DeadClass.of_status("http 409"),
    ],
)
def test_a_class_reads_back_from_its_label(dead_class: DeadClass) -> None:
    assert DeadClass.from_label(dead_class.label) == dead_class


@pytest.mark.parametrize("label", ["", "status", "something else", "http 4222"])
def test_an_empty_or_unknown_label_is_no_class(label: str) -> None:
    assert DeadClass.from_label(label) is None


def _letter(step: ToDlq) -> story.StoryHeaders:
    record = dlq_record(DELIVERY, step, hops=(), now_ms=NOW, route="billing", dlq_topic="dlq")
    told = story.decode(record.headers)
    assert told is not None
    return told


def test_a_dead_letter_is_written_with_its_class() -> None:
    # A consumer's reason that starts like one of siding's own: the class, not the text, decides.
    step = ToDlq("malformed order: no currency", DeadClass(DeadKind.CONSUMER))
    told = _letter(step)
    assert dict(_letter_headers(step))[story.DEAD_CLASS] == b"consumer said dead"
    assert told.dead_class == DeadClass(DeadKind.CONSUMER)
    assert reason_class(told.reason, told.dead_class) == "consumer said dead"


def _letter_headers(step: ToDlq) -> tuple[tuple[str, bytes], ...]:
    return dlq_record(DELIVERY, step, hops=(), now_ms=NOW, route="billing", dlq_topic="d").headers


LEGACY = [
    (
        "the consumer died 4 times while handling this message (3 of them alone); last: x",
        "consumer died",
    ),
    ("http 413: message too large for the endpoint (6291456 bytes): body", "too large"),
    ("message too large: 6291475 bytes is more than max_message_bytes=1", "too large"),
    ("retries exhausted after 3 attempts: deadline of 1s exceeded", "retries exhausted"),
    ("malformed siding headers: bad json", "malformed"),
    ("record in a retry lane without siding headers", "malformed"),
    ("record without siding headers", "malformed"),
    ("http 422: unprocessable: the body the consumer wrote", "http 422"),
    ("grpc INVALID_ARGUMENT: bad field", "grpc INVALID_ARGUMENT"),
    ("consumer answered DEAD", "consumer said dead"),
    ("customer 8812 has no billing account", "consumer said dead"),
]


@pytest.mark.parametrize(("reason", "label"), LEGACY)
def test_a_letter_written_before_classes_were_kept_is_classed_by_its_text(
    reason: str, label: str
) -> None:
    # A DLQ record of the older version: its story has no siding.dead-class header at all.
    headers = tuple((n, v) for n, v in _letter_headers(ToDlq(reason)) if n != story.DEAD_CLASS)
    told = story.decode(headers)
    assert told is not None and told.dead_class is None
    assert reason_class(told.reason, told.dead_class) == label
    assert legacy_class(reason).label == label


def test_a_step_without_a_class_writes_an_empty_one_and_reads_back_by_its_text() -> None:
    told = _letter(ToDlq("retries exhausted after 2 attempts: x"))
    assert told.dead_class is None
    assert reason_class(told.reason, told.dead_class) == "retries exhausted"


def test_a_settlement_keeps_its_answers_class() -> None:
    outcome = outcome_from_http(422)
    record = settlement.settlement_record("s", settlement.Settlement("t1", outcome, NOW))
    assert record.value is not None
    decoded = settlement.decode(record.key or b"", record.value)
    assert decoded.outcome.dead_class == DeadClass.of_status("http 422")


def test_a_settlement_written_before_classes_were_kept_is_classed_by_its_text() -> None:
    # The parked call's answer, written by the older version: no "dead_class" field.
    old = {"kind": "dead", "reason": "http 413: message too large for the endpoint (9 bytes)"}
    decoded = settlement.decode(b"t1", json.dumps(old).encode())
    step = next_step(decoded.outcome, 1, (), NOW, max_retry_after_s=0)
    assert isinstance(step, ToDlq) and step.dead_class is None
    assert reason_class(step.reason, step.dead_class) == "too large"
