"""Consume-and-produce (docs/outputs.md): the pure parts, from an answer's outputs to the records
siding writes, and the order in which a parked call's outputs and settlement are written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from siding import naming
from siding.config import parse_config
from siding.dispatch import BreakerSettings, CircuitBreaker, ParkedCall, ParkTimer, Settled, Work
from siding.errors import ConfigError, DurableWriteError
from siding.model import ACK, Delivery, Outcome, OutcomeKind, Output, Result, Verdict
from siding.pipeline.executor.parked import Adoption, ParkedCalls
from siding.pipeline.executor.plan import build_plan
from siding.pipeline.executor.task import route_out, tally
from siding.policy import next_step
from siding.routing import settlement
from siding.routing.outputs import OUTPUT_ID, output_records
from siding.routing.producer import OutRecord
from siding.steps import Done, ToLane
from siding.transport.batch_envelope import item_outcome
from siding.transport.outcomes import outcome_from_result
from siding.transport.outputs import ack_from_body, screen_outputs

CONFIG = """
[kafka]
bootstrap = "localhost:9092"
[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://localhost:50051"
lanes = [{ delay = "1s" }]
outputs = ["orders.billed", "orders.audit"]
"""
DELIVERY = Delivery("trips/3/41", "trips", 3, 41, b"k", b"v")
BILLED = Output("orders.billed", b"\x00k", bytes(range(256)), (("h", b"\xff"), ("h", b"")))
ALLOWED = ("orders.billed", "orders.audit")


def test_an_ack_keeps_its_outputs_through_the_policy() -> None:
    # Given a consumer's ACK with two outputs
    outcome = outcome_from_result(Result("trips/3/41", Verdict.ACK, outputs=(BILLED, BILLED)))
    # Then the outcome and the step carry them, in order
    assert outcome.kind is OutcomeKind.ACK
    assert next_step(outcome, 1, (), 0, max_retry_after_s=1) == Done((BILLED, BILLED))
    # and an ACK without outputs is the plain ACK
    assert outcome_from_result(Result("x", Verdict.ACK)) is ACK


@pytest.mark.parametrize(
    ("outputs", "allowed", "reason"),
    [
        ((BILLED, Output("orders.secret")), ALLOWED, "writes to 'orders.secret', not among"),
        ((BILLED,), (), "carries 1 output record(s) and this route allows none"),
    ],
)
def test_an_output_to_a_topic_not_allowed_makes_the_answer_a_retry(
    outputs: tuple[Output, ...], allowed: tuple[str, ...], reason: str
) -> None:
    screened = screen_outputs(Outcome(OutcomeKind.ACK, outputs=outputs), allowed)
    # Then the answer is a RETRY that says why, and nothing of it is to be produced
    assert (screened.kind, screened.outputs) == (OutcomeKind.RETRY, ())
    assert reason in screened.reason


def test_allowed_outputs_pass_and_a_verdict_other_than_ack_produces_nothing() -> None:
    ok = Outcome(OutcomeKind.ACK, outputs=(BILLED,))
    assert screen_outputs(ok, ALLOWED) is ok
    dead = screen_outputs(Outcome(OutcomeKind.DEAD, "bad", outputs=(BILLED,)), ALLOWED)
    assert (dead.kind, dead.reason, dead.outputs) == (OutcomeKind.DEAD, "bad", ())


def _json_outputs(*outputs: Output) -> bytes:
    from siding_consumer.outputs import outputs_to_json

    return json.dumps({"outputs": outputs_to_json(outputs)}).encode()


def test_a_webhook_2xx_body_carries_outputs() -> None:
    body = _json_outputs(BILLED)
    assert ack_from_body("application/json; charset=utf-8", body).outputs == (BILLED,)
    # Any other 2xx acks as it always did
    assert ack_from_body("text/plain", body) is ACK
    assert ack_from_body("application/json", b'{"ok": true}') is ACK
    assert ack_from_body("application/json", b"") is ACK


@pytest.mark.parametrize(
    ("body", "complete", "reason"),
    [
        (b'{"outputs": [{"topic": "t", "value_base64": "%%"}]}', True, "value_base64 is not valid"),
        (b'{"outputs": "nope"}', True, "outputs is not a list"),
        (b'{"outputs": [', True, "not valid JSON"),
        (b'{"outputs": []}', False, "could not be read whole"),
    ],
)
def test_a_webhook_answer_whose_outputs_cannot_be_read_is_a_retry(
    body: bytes, complete: bool, reason: str
) -> None:
    outcome = ack_from_body("application/json", body, complete)
    assert outcome.kind is OutcomeKind.RETRY
    assert reason in outcome.reason


def test_a_batch_item_carries_outputs() -> None:
    from siding_consumer.outputs import outputs_to_json

    item = {"id": "a/0/1", "verdict": "ack", "outputs": outputs_to_json([BILLED])}
    assert item_outcome(item).outputs == (BILLED,)
    bad = item_outcome({"id": "a/0/2", "verdict": "ack", "outputs": [{"topic": 3}]})
    assert bad.kind is OutcomeKind.RETRY
    assert "results['a/0/2'].outputs[0].topic" in bad.reason
    # a retry's outputs are not read (only an ack produces)
    later = item_outcome({"id": "a/0/3", "verdict": "retry", "reason": "x", "outputs": 5})
    assert (later.kind, later.reason) == (OutcomeKind.RETRY, "x")


def test_output_records_keep_the_consumers_record_and_add_an_id_and_provenance() -> None:
    first, second = output_records(DELIVERY, [BILLED, Output("orders.audit")], "billing")
    assert (first.topic, first.key, first.value) == (BILLED.topic, BILLED.key, BILLED.value)
    # the consumer's headers first, unchanged, then siding's
    assert first.headers == (
        ("h", b"\xff"),
        ("h", b""),
        (OUTPUT_ID, b"trips/3/41/0"),
        ("siding.input-topic", b"trips"),
        ("siding.input-partition", b"3"),
        ("siding.input-offset", b"41"),
        ("siding.output-route", b"billing"),
    )
    assert (second.key, second.value) == (None, None)
    assert dict(second.headers)[OUTPUT_ID] == b"trips/3/41/1"
    # the same answer again (after a crash) gives the same ids
    again = output_records(DELIVERY, [BILLED, Output("orders.audit")], "billing")
    assert [r.headers for r in again] == [first.headers, second.headers]


def test_a_task_writes_a_finished_records_outputs_and_counts_them() -> None:
    route = parse_config(CONFIG).route[0]
    plan = build_plan(route, 0, {}, 1, {})
    other = Delivery("trips/3/42", "trips", 3, 42, None, b"w")
    settled = [
        Settled(Work(DELIVERY), Done((BILLED, BILLED))),
        Settled(Work(other), ToLane(1, 2, 5_000, "later")),
    ]
    out = route_out(plan, settled, {}, 1_000)
    assert [r.topic for r in out] == [
        "orders.billed",
        "orders.billed",
        naming.lane_topic("billing", 1),
    ]
    assert tally(settled).counts.outputs == 2


def test_the_route_names_the_topics_it_may_write() -> None:
    assert parse_config(CONFIG).route[0].outputs == ALLOWED
    for value, fragment in [
        ('["bad topic"]', "not a legal Kafka topic name"),
        ('["a", "a"]', "listed twice"),
        ('["siding.billing.retry-1"]', "siding's own topics"),
        ('["orders.dlq"]\ndlq = "orders.dlq"', "is the route's DLQ"),
    ]:
        text = CONFIG.replace('["orders.billed", "orders.audit"]', value)
        with pytest.raises(ConfigError) as caught:
            parse_config(text)
        assert caught.value.key == "route[billing].outputs"
        assert fragment in caught.value.message


def test_a_settlement_says_how_many_outputs_were_written_before_it() -> None:
    record = settlement.settlement_record("s", settlement.Settlement("tok", ACK, 5, outputs=2))
    assert record.key is not None and record.value is not None
    assert settlement.decode(record.key, record.value).outputs == 2


class _Writer:
    """Records what was written, in order; refuses every write to ``failing`` topics."""

    def __init__(self, failing: str = "") -> None:
        self.writes: list[list[str]] = []
        self.failing = failing

    def __call__(self, records: Sequence[OutRecord]) -> None:
        if any(r.topic == self.failing for r in records):
            raise DurableWriteError("broker says no")
        self.writes.append([r.topic for r in records])


async def _settle_parked(writer: _Writer) -> list[list[str]]:
    loop = asyncio.get_running_loop()

    async def answer() -> tuple[Outcome, float]:
        return Outcome(OutcomeKind.ACK, outputs=(BILLED, BILLED)), 0.1

    async def probe() -> bool:
        return True

    calls = ParkedCalls(loop)
    task = loop.create_task(answer())
    adoption = Adoption(
        ("billing", "grpc://x"),
        "settled",
        ParkTimer(),
        CircuitBreaker(BreakerSettings(), probe),
        writer,
        "billing",
    )
    calls.adopt([ParkedCall(Work(DELIVERY), "tok", task)], adoption)
    await task
    for _ in range(200):
        await asyncio.sleep(0.01)
        if calls.settled or calls.unsettled_failures:
            break
    return writer.writes


async def test_a_parked_calls_outputs_are_written_before_its_settlement() -> None:
    writes = await _settle_parked(_Writer())
    assert writes == [["orders.billed", "orders.billed"], ["settled"]]


async def test_a_parked_call_whose_outputs_cannot_be_written_is_not_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("siding.pipeline.executor.parked.WRITE_ATTEMPTS", 1)
    # Then no settlement: the park lane asks the consumer again once the record is due
    assert await _settle_parked(_Writer(failing="orders.billed")) == []
