"""HttpBatchTransport over real sockets against an aiohttp server on 127.0.0.1: the signed
envelope, per-delivery answers, a refused batch split into single deliveries, whole-batch
statuses, deadlines and a consumer that closes the connection."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from siding.consumer import (
    Reply,
    ack,
    answer_batch,
    batch_answer,
    dead,
    deliveries_from_batch,
    retry,
    verify_webhook,
)
from siding.model import DeadClass, DeadKind, Delivery, Outcome, OutcomeKind
from siding.transport.batching import BatchLimits
from siding.transport.http import WebhookSpec
from siding.transport.http_batch import HttpBatchTransport

SECRET = "whsec_" + base64.b64encode(b"b" * 32).decode()
LIMITS = BatchLimits(max_items=16, linger_s=0.01, max_bytes=4 << 20)
ODD = bytes(range(256))
SAYS = {"Siding-Batch": "v1"}

Answer = Callable[[web.Request, list[Delivery]], Awaitable[web.StreamResponse]]


@dataclass
class Consumer:
    url: str = ""
    batches: list[list[Delivery]] = field(default_factory=list)
    singles: list[str] = field(default_factory=list)
    answer: Answer | None = None
    # What the consumer's answers say (an SDK's webhook server says it on every answer).
    says_on_singles: bool = False
    says_on_batches: bool = False


async def per_delivery(request: web.Request, batch: list[Delivery]) -> web.StreamResponse:  # noqa: ARG001
    async def handle(d: Delivery) -> Reply:
        if d.key == b"dead":
            return dead("unknown currency XBT")
        return retry(30, "rate limited") if d.key == b"retry" else ack()

    body = batch_answer(await answer_batch(handle, batch))
    return web.Response(body=body, content_type="application/json")


@pytest.fixture
async def consumer() -> AsyncIterator[Consumer]:
    app = web.Application()
    server = TestServer(app)
    state = Consumer()

    async def hook(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        verify_webhook(SECRET, dict(request.headers), body)
        if request.headers["content-type"] != "application/cloudevents-batch+json":
            state.singles.append(request.headers["webhook-id"])
            return web.Response(status=204, headers=SAYS if state.says_on_singles else {})
        batch = deliveries_from_batch(body)
        assert request.headers["webhook-id"] == f"batch:{batch[0].id}:{len(batch)}"
        assert request.headers["authorization"] == "Bearer t0ken"
        state.batches.append(batch)
        answer = await (state.answer or per_delivery)(request, batch)
        if state.says_on_batches:
            answer.headers.update(SAYS)
        return answer

    app.router.add_post("/hook", hook)
    await server.start_server()
    state.url = str(server.make_url("/hook"))
    try:
        yield state
    finally:
        await server.close()


@pytest.fixture
async def transport(consumer: Consumer) -> AsyncIterator[HttpBatchTransport]:
    sender = HttpBatchTransport(
        WebhookSpec(consumer.url, secret=SECRET, bearer_token="t0ken"), limits=LIMITS
    )
    try:
        yield sender
    finally:
        await sender.close()


def delivery(n: int, key: bytes | None = None, value: bytes | None = b"v") -> Delivery:
    return Delivery(f"orders/0/{n}", "orders", 0, n, key=key, value=value, attempt=n % 3 + 1)


async def send_all(
    t: HttpBatchTransport, batch: list[Delivery], deadline_s: float = 5
) -> list[Outcome]:
    return list(await asyncio.gather(*(t.send(d, deadline_s) for d in batch)))


async def test_one_signed_post_carries_the_batch_and_each_delivery_gets_its_answer(
    consumer: Consumer, transport: HttpBatchTransport
) -> None:
    sent = [
        delivery(0, b"ack", ODD),
        delivery(1, b"retry", None),
        delivery(2, b"dead", b""),
        Delivery("orders/0/3", "orders", 0, 3, key=None, value=ODD[::-1],
                 headers=(("bin", b"\x00\xff"), ("content-type", b"application/x-thing"))),
    ]  # fmt: skip
    outcomes = await send_all(transport, sent)
    assert consumer.batches == [sent]  # one request, every byte as it was
    assert outcomes == [
        Outcome(OutcomeKind.ACK),
        Outcome(OutcomeKind.RETRY, "rate limited", 30.0),
        Outcome(OutcomeKind.DEAD, "unknown currency XBT", dead_class=DeadClass(DeadKind.CONSUMER)),
        Outcome(OutcomeKind.ACK),
    ]


async def test_a_batch_refused_whole_goes_again_one_by_one_and_only_the_bad_one_dies(
    consumer: Consumer, transport: HttpBatchTransport
) -> None:
    async def strict(_request: web.Request, batch: list[Delivery]) -> web.StreamResponse:
        if any(d.key == b"bad" for d in batch):
            return web.Response(status=422, text="a bad record in the batch")
        return web.Response(status=204)

    consumer.answer = strict
    sent = [delivery(0), delivery(1, b"bad"), delivery(2)]
    outcomes = await send_all(transport, sent)
    assert [o.kind for o in outcomes] == [OutcomeKind.ACK, OutcomeKind.DEAD, OutcomeKind.ACK]
    assert outcomes[1].reason == "http 422: a bad record in the batch"
    assert sorted(len(b) for b in consumer.batches) == [1, 1, 1, 3]
    # No attempt was spent: each went again as it was.
    assert sorted((d.id, d.attempt) for b in consumer.batches[1:] for d in b) == [
        (d.id, d.attempt) for d in sent
    ]


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (204, {}, Outcome(OutcomeKind.ACK)),
        (503, {"Retry-After": "3"}, Outcome(OutcomeKind.BACKOFF, "http 503: busy", 3.0)),
        (500, {}, Outcome(OutcomeKind.RETRY, "http 500: busy")),
        (410, {}, Outcome(OutcomeKind.GONE, "http 410: endpoint gone: busy")),
    ],
)
async def test_a_status_applies_to_every_delivery_of_the_batch(
    consumer: Consumer,
    transport: HttpBatchTransport,
    status: int,
    headers: dict[str, str],
    expected: Outcome,
) -> None:
    async def answer(_request: web.Request, _batch: list[Delivery]) -> web.StreamResponse:
        return web.Response(status=status, headers=headers, text="" if status == 204 else "busy")

    consumer.answer = answer
    assert await send_all(transport, [delivery(n) for n in range(5)]) == [expected] * 5
    assert len(consumer.batches) == 1


async def test_each_delivery_keeps_its_own_deadline(
    consumer: Consumer, transport: HttpBatchTransport
) -> None:
    async def slow(_request: web.Request, _batch: list[Delivery]) -> web.StreamResponse:
        await asyncio.sleep(0.6)
        return web.Response(status=204)

    consumer.answer = slow
    short, long = await asyncio.gather(
        transport.send(delivery(1), 0.2), transport.send(delivery(2), 3)
    )
    assert short == Outcome(OutcomeKind.RETRY, "deadline of 0.2s exceeded", no_answer=True)
    assert long == Outcome(OutcomeKind.ACK)


async def test_a_consumer_that_drops_the_connection_makes_each_delivery_a_suspect(
    consumer: Consumer, transport: HttpBatchTransport
) -> None:
    async def vanish(request: web.Request, _batch: list[Delivery]) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        await asyncio.sleep(1)
        return web.Response(status=204)

    consumer.answer = vanish
    outcomes = await send_all(transport, [delivery(n) for n in range(3)])
    assert [(o.kind, o.lost) for o in outcomes] == [(OutcomeKind.BACKOFF, True)] * 3


async def test_a_body_that_is_not_an_answer_acks_and_a_broken_answer_never_does(
    consumer: Consumer, transport: HttpBatchTransport
) -> None:
    bodies = iter([b"ok", b'{"results": [{"id": "orders/0/0", "verdict": "dead"'])

    async def answer(_request: web.Request, _batch: list[Delivery]) -> web.StreamResponse:
        return web.Response(body=next(bodies), content_type="application/json")

    consumer.answer = answer
    assert {o.kind for o in await send_all(transport, [delivery(0), delivery(1)])} == {
        OutcomeKind.ACK
    }
    broken = await send_all(transport, [delivery(0), delivery(1)])
    assert {o.kind for o in broken} == {OutcomeKind.RETRY}
    assert broken[0].reason.startswith("the batch answer is not valid JSON")
    assert json.loads(json.dumps([d.id for b in consumer.batches for d in b])) == [
        "orders/0/0", "orders/0/1", "orders/0/0", "orders/0/1",
    ]  # fmt: skip


async def test_a_consumer_that_refuses_batches_with_415_gets_single_webhooks(
    consumer: Consumer, transport: HttpBatchTransport, caplog: pytest.LogCaptureFixture
) -> None:
    async def no_batches(_request: web.Request, _batch: list[Delivery]) -> web.StreamResponse:
        return web.Response(status=415, text="unsupported media type")

    consumer.answer = no_batches
    caplog.set_level(logging.WARNING, "siding.transport.http_batch")
    first = await send_all(transport, [delivery(n) for n in range(3)])
    then = await send_all(transport, [delivery(n) for n in range(3, 5)])
    assert {o.kind for o in first + then} == {OutcomeKind.ACK}  # no attempt spent, none lost
    assert len(consumer.batches) == 1  # the one refused
    assert sorted(consumer.singles) == [f"orders/0/{n}" for n in range(5)]
    assert not transport.batching
    [line] = [r.getMessage() for r in caplog.records]
    assert f"{consumer.url}') answered 415 to a batch" in line


@pytest.fixture
async def offering(consumer: Consumer) -> AsyncIterator[HttpBatchTransport]:
    """What an HTTP route without a ``batch`` key gets."""
    sender = HttpBatchTransport(
        WebhookSpec(consumer.url, secret=SECRET, bearer_token="t0ken"), limits=LIMITS, offered=True
    )
    try:
        yield sender
    finally:
        await sender.close()


async def test_an_offering_route_sends_a_consumer_that_does_not_say_it_reads_batches_singles(
    consumer: Consumer, offering: HttpBatchTransport
) -> None:
    outcomes = await send_all(offering, [delivery(n) for n in range(6)])
    outcomes += await send_all(offering, [delivery(n) for n in range(6, 9)])
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}
    assert consumer.batches == []
    assert sorted(consumer.singles) == sorted(f"orders/0/{n}" for n in range(9))
    assert not offering.batching


async def test_an_offering_route_batches_once_the_consumer_says_it_reads_batches(
    consumer: Consumer, offering: HttpBatchTransport, caplog: pytest.LogCaptureFixture
) -> None:
    consumer.says_on_singles = consumer.says_on_batches = True
    caplog.set_level(logging.INFO, "siding.transport.http_batch")
    first = await send_all(offering, [delivery(0)])
    then = await send_all(offering, [delivery(n, b"dead" if n == 3 else None) for n in range(1, 6)])
    assert consumer.singles == ["orders/0/0"]  # before the consumer had said anything
    assert consumer.batches == [[delivery(n, b"dead" if n == 3 else None) for n in range(1, 6)]]
    assert [o.kind for o in first + then] == [OutcomeKind.ACK] * 3 + [OutcomeKind.DEAD] + [
        OutcomeKind.ACK
    ] * 2
    assert offering.batching
    assert any("reads batches" in r.getMessage() for r in caplog.records)


async def test_an_offered_batch_answered_without_the_word_goes_again_as_singles_for_good(
    consumer: Consumer, offering: HttpBatchTransport, caplog: pytest.LogCaptureFixture
) -> None:
    # One instance behind the URL says it reads batches, the one that takes the batch does
    # not (a rolling deploy): its 2xx may mean it took the array for one event, so nothing of
    # the batch is ACKed by it; each delivery goes again alone, and so does everything after.
    consumer.says_on_singles = True
    caplog.set_level(logging.WARNING, "siding.transport.http_batch")
    await send_all(offering, [delivery(0)])
    batch = [delivery(n) for n in range(1, 5)]
    outcomes = await send_all(offering, batch)
    outcomes += await send_all(offering, [delivery(n) for n in range(5, 8)])
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}  # no attempt spent, none lost
    assert consumer.batches == [batch]
    assert sorted(consumer.singles) == sorted(f"orders/0/{n}" for n in range(8))
    assert not offering.batching
    [line] = [r.getMessage() for r in caplog.records]
    assert "did not say 'siding-batch: v1' on a batch" in line


def streaming(slow: asyncio.Event, *, cut_after: int | None = None) -> Answer:
    """A consumer that streams its results as each finishes (docs/batch.md); the delivery keyed
    ``slow`` finishes only when ``slow`` is set. ``cut_after``: the connection is dropped after
    that many lines."""

    async def answer(request: web.Request, batch: list[Delivery]) -> web.StreamResponse:
        assert "application/x-ndjson" in request.headers["accept"]
        response = web.StreamResponse(headers={"content-type": "application/x-ndjson", **SAYS})
        await response.prepare(request)

        async def one(d: Delivery) -> bytes:
            if d.key == b"slow":
                await slow.wait()
            verdict = "dead" if d.key == b"dead" else "ack"
            return json.dumps({"id": d.id, "verdict": verdict, "reason": "r"}).encode() + b"\n"

        for written, line in enumerate(asyncio.as_completed([one(d) for d in batch])):
            if cut_after is not None and written == cut_after:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write(await line)
        await response.write_eof()
        return response

    return answer


async def test_streamed_results_settle_each_delivery_as_it_finishes(
    consumer: Consumer, offering: HttpBatchTransport
) -> None:
    # A slow delivery holds back none of its batch-mates: their sends return while it runs.
    consumer.says_on_singles = True
    slow = asyncio.Event()
    consumer.answer = streaming(slow)
    await send_all(offering, [delivery(0)])  # the consumer says it reads batches
    batch = [delivery(1, b"slow"), delivery(2), delivery(3, b"dead"), delivery(4)]
    sends = [asyncio.ensure_future(offering.send(d, 10)) for d in batch]
    fast = await asyncio.wait_for(asyncio.gather(*sends[1:]), timeout=5)
    assert not sends[0].done()
    slow.set()
    assert (await asyncio.wait_for(sends[0], timeout=5)).kind is OutcomeKind.ACK
    assert [o.kind for o in fast] == [OutcomeKind.ACK, OutcomeKind.DEAD, OutcomeKind.ACK]
    assert consumer.batches == [batch]  # one request


async def test_a_stream_cut_short_keeps_the_answers_it_gave_and_the_rest_are_suspects(
    consumer: Consumer, offering: HttpBatchTransport
) -> None:
    consumer.says_on_singles = True
    slow = asyncio.Event()
    consumer.answer = streaming(slow, cut_after=2)
    await send_all(offering, [delivery(0)])
    batch = [delivery(1), delivery(2, b"dead"), delivery(3, b"slow"), delivery(4, b"slow")]
    outcomes = await asyncio.wait_for(send_all(offering, batch), timeout=5)
    assert [o.kind for o in outcomes[:2]] == [OutcomeKind.ACK, OutcomeKind.DEAD]
    assert all(o.lost for o in outcomes[2:]), outcomes  # suspects: asked again, no attempt spent
