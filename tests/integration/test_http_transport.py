"""HttpTransport over real sockets against an aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import gc
import socket
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from email.utils import formatdate

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDictProxy

from siding.consumer.webhook import WebhookVerificationError, verify_webhook
from siding.model import Delivery, OutcomeKind, Output, delivery_id
from siding.transport.http import HttpTransport, WebhookSpec
from siding_consumer import ack
from siding_consumer.envelope import single_answer

SECRET = "whsec_" + base64.b64encode(b"w" * 32).decode()
DEADLINE_S = 5.0

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Received:
    headers: CIMultiDictProxy[str]
    body: bytes
    peer_port: int


@dataclass
class Consumer:
    """A webhook endpoint whose answer each test chooses; it records every request."""

    url: str
    received: list[Received] = field(default_factory=list)
    elsewhere_hits: int = 0
    answer: Answer | None = None


async def answer_204(_request: web.Request) -> web.StreamResponse:
    return web.Response(status=204)


@pytest.fixture
async def consumer() -> AsyncIterator[Consumer]:
    app = web.Application()
    server = TestServer(app)
    state = Consumer(url="")

    async def hook(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        body = await request.read()
        state.received.append(Received(request.headers, body, peer[1] if peer else -1))
        return await (state.answer or answer_204)(request)

    async def elsewhere(_request: web.Request) -> web.StreamResponse:
        state.elsewhere_hits += 1
        return web.Response(status=200)

    app.router.add_post("/hook", hook)
    app.router.add_route("*", "/elsewhere", elsewhere)
    await server.start_server()
    state.url = str(server.make_url("/hook"))
    try:
        yield state
    finally:
        await server.close()


@pytest.fixture
async def transport(consumer: Consumer) -> AsyncIterator[HttpTransport]:
    sender = HttpTransport(WebhookSpec(consumer.url, secret=SECRET, bearer_token="t0ken"))
    try:
        yield sender
    finally:
        await sender.close()


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback port that is bound but not listening: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/hook"


DELIVERY = Delivery(
    id=delivery_id("trips", 3, 42),
    topic="trips",
    partition=3,
    offset=42,
    key=b"rider-7",
    value=b'{"fare": 12.5}',
    headers=(("trace-id", b"abc123"), ("content-type", b"application/json")),
    timestamp_ms=1_700_000_000_123,
    attempt=1,
    lane=0,
)


def answering(status: int, headers: dict[str, str] | None = None, text: str = "") -> Answer:
    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, headers=headers, text=text or None)

    return answer


# --- what the consumer receives ---


async def test_the_consumer_receives_the_value_cloudevents_and_a_valid_signature(
    consumer: Consumer, transport: HttpTransport
) -> None:
    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.ACK
    [got] = consumer.received
    assert got.body == b'{"fare": 12.5}'
    assert {name: got.headers.get(name) for name in EXPECTED} == EXPECTED
    assert got.headers.getall("content-type") == ["application/json"]
    assert int(got.headers["webhook-timestamp"]) == pytest.approx(time.time(), abs=5)
    assert verify_webhook(SECRET, got.headers, got.body) == "trips/3/42"


EXPECTED = {
    "ce-specversion": "1.0",
    "ce-id": "trips/3/42",
    "ce-source": "kafka://trips",
    "ce-type": "dev.siding.delivery",
    "ce-time": "2023-11-14T22:13:20.123Z",
    "ce-subject": "rider-7",
    "content-type": "application/json",
    "webhook-id": "trips/3/42",
    "siding-attempt": "1",
    "siding-lane": "0",
    "siding-topic": "trips",
    "siding-partition": "3",
    "siding-offset": "42",
    "trace-id": "abc123",
    "authorization": "Bearer t0ken",
}


async def test_a_tampered_or_stale_request_is_rejected_by_the_verifier(
    consumer: Consumer, transport: HttpTransport
) -> None:
    await transport.send(DELIVERY, DEADLINE_S)
    [got] = consumer.received

    with pytest.raises(WebhookVerificationError, match="signature"):
        verify_webhook(SECRET, got.headers, got.body.replace(b"12.5", b"99.9"))
    with pytest.raises(WebhookVerificationError, match="old"):
        verify_webhook(SECRET, got.headers, got.body, now_s=time.time() + 3600)
    wrong = "whsec_" + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(WebhookVerificationError, match="signature"):
        verify_webhook(wrong, got.headers, got.body)


async def test_the_webhook_id_is_stable_across_attempts(
    consumer: Consumer, transport: HttpTransport
) -> None:
    await transport.send(DELIVERY, DEADLINE_S)
    await transport.send(replace(DELIVERY, attempt=2, lane=1), DEADLINE_S)

    first, second = consumer.received
    for name in ("webhook-id", "ce-id"):
        assert first.headers[name] == second.headers[name] == "trips/3/42"
    assert (second.headers["siding-attempt"], second.headers["siding-lane"]) == ("2", "1")
    assert verify_webhook(SECRET, second.headers, second.body) == "trips/3/42"


async def test_a_null_value_is_posted_as_an_empty_body(
    consumer: Consumer, transport: HttpTransport
) -> None:
    await transport.send(replace(DELIVERY, value=None, key=b"\x00\x01"), DEADLINE_S)

    [got] = consumer.received
    assert got.body == b""
    assert got.headers["content-length"] == "0"
    assert got.headers["siding-key"] == "AAE="
    assert "ce-subject" not in got.headers
    assert verify_webhook(SECRET, got.headers, got.body) == "trips/3/42"


async def test_unsafe_kafka_headers_are_not_forwarded(
    consumer: Consumer, transport: HttpTransport
) -> None:
    headers = (
        ("x-evil", b"a\r\nx-injected: 1"),
        ("x-nul", b"a\x00b"),
        ("webhook-id", b"forged"),
        ("x-ok", b"fine"),
    )

    outcome = await transport.send(replace(DELIVERY, headers=headers), DEADLINE_S)

    assert outcome.kind is OutcomeKind.ACK
    [got] = consumer.received
    assert got.headers["x-ok"] == "fine"
    for name in ("x-evil", "x-injected", "x-nul"):
        assert name not in got.headers
    assert got.headers.getall("webhook-id") == ["trips/3/42"]
    assert transport.dropped_headers == 3


# --- every HTTP answer, mapped ---


@pytest.mark.parametrize("status", [200, 201, 202, 204])
async def test_2xx_is_ack(consumer: Consumer, transport: HttpTransport, status: int) -> None:
    consumer.answer = answering(status)

    assert (await transport.send(DELIVERY, DEADLINE_S)).kind is OutcomeKind.ACK


async def test_a_2xx_json_answer_carries_outputs_byte_for_byte(
    consumer: Consumer, transport: HttpTransport
) -> None:
    # Given a consumer that answers with the SDK's own webhook answer for an ack with outputs
    sent = (
        Output("orders.billed", bytes(range(256)), bytes(range(255, -1, -1)), (("h", b"\x00"),)),
        Output("orders.audit"),
    )
    answer = single_answer(ack(sent))

    async def with_outputs(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=answer.status, headers=dict(answer.headers), body=answer.body)

    consumer.answer = with_outputs
    # Then siding reads them all, exactly (docs/outputs.md)
    outcome = await transport.send(DELIVERY, DEADLINE_S)
    assert (outcome.kind, outcome.outputs) == (OutcomeKind.ACK, sent)


async def test_a_2xx_json_answer_whose_outputs_cannot_be_read_is_a_retry(
    consumer: Consumer, transport: HttpTransport
) -> None:
    consumer.answer = answering(200, {"content-type": "application/json"}, '{"outputs": [{}]}')
    outcome = await transport.send(DELIVERY, DEADLINE_S)
    assert outcome.kind is OutcomeKind.RETRY
    assert "outputs[0].topic is missing" in outcome.reason


@pytest.mark.parametrize("status", [429, 503])
async def test_slow_down_with_retry_after_seconds(
    consumer: Consumer, transport: HttpTransport, status: int
) -> None:
    consumer.answer = answering(status, {"Retry-After": "7"})

    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.BACKOFF
    assert outcome.retry_after_s == 7.0


@pytest.mark.parametrize("status", [429, 503])
async def test_slow_down_with_retry_after_http_date(
    consumer: Consumer, transport: HttpTransport, status: int
) -> None:
    consumer.answer = answering(status, {"Retry-After": formatdate(time.time() + 120, usegmt=True)})

    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.BACKOFF
    assert outcome.retry_after_s is not None
    assert 110 <= outcome.retry_after_s <= 121


@pytest.mark.parametrize("status", [408, 500, 502, 504])
async def test_retriable_failures_go_to_a_retry_lane(
    consumer: Consumer, transport: HttpTransport, status: int
) -> None:
    consumer.answer = answering(status)

    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.RETRY
    assert f"http {status}" in outcome.reason


async def test_410_means_the_endpoint_is_gone(consumer: Consumer, transport: HttpTransport) -> None:
    consumer.answer = answering(410)

    assert (await transport.send(DELIVERY, DEADLINE_S)).kind is OutcomeKind.GONE


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_other_4xx_is_dead_and_the_reason_quotes_the_answer(
    consumer: Consumer, transport: HttpTransport, status: int
) -> None:
    consumer.answer = answering(status, text="fare must be positive\r\n\x1b[31m")

    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.DEAD
    assert outcome.reason == f"http {status}: fare must be positive [31m"


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials_back_off(
    consumer: Consumer, transport: HttpTransport, status: int
) -> None:
    consumer.answer = answering(status)

    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.BACKOFF
    assert "credentials" in outcome.reason


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirects_are_not_followed(
    consumer: Consumer, transport: HttpTransport, status: int
) -> None:
    consumer.answer = answering(status, {"Location": "/elsewhere"})

    outcome = await transport.send(DELIVERY, DEADLINE_S)

    assert outcome.kind is OutcomeKind.BACKOFF
    assert "redirect" in outcome.reason
    assert consumer.elsewhere_hits == 0


async def test_no_answer_within_the_deadline_is_retry(
    consumer: Consumer, transport: HttpTransport
) -> None:
    async def hang(_request: web.Request) -> web.StreamResponse:
        await asyncio.Event().wait()  # cancelled when the client hangs up
        raise AssertionError("unreachable")

    consumer.answer = hang
    started = time.monotonic()

    outcome = await transport.send(DELIVERY, 0.3)

    assert outcome.kind is OutcomeKind.RETRY
    assert "deadline" in outcome.reason
    assert time.monotonic() - started < 2.0


async def test_an_unreachable_endpoint_backs_off_and_probes_down(refused_url: str) -> None:
    sender = HttpTransport(WebhookSpec(refused_url))
    try:
        outcome = await sender.send(DELIVERY, DEADLINE_S)
        up = await sender.probe()
    finally:
        await sender.close()

    assert outcome.kind is OutcomeKind.BACKOFF
    assert "unreachable" in outcome.reason
    assert up is False


async def test_a_connect_that_hangs_backs_off_after_the_connect_timeout() -> None:
    # Given a listener whose accept queue is full, so new connections are never completed
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        sender = HttpTransport(WebhookSpec(f"http://127.0.0.1:{port}/hook", connect_timeout_s=0.3))
        try:
            started = time.monotonic()
            outcome = await sender.send(DELIVERY, DEADLINE_S)
            elapsed = time.monotonic() - started
        finally:
            await sender.close()
            for filler in fillers:
                filler.close()

    # Then nothing was delivered, so no attempt is spent: BACKOFF, not RETRY
    assert outcome.kind is OutcomeKind.BACKOFF
    assert elapsed < DEADLINE_S / 2


async def test_any_http_answer_means_the_probe_is_up(
    consumer: Consumer, transport: HttpTransport
) -> None:
    # /hook takes only POST, so the probe's OPTIONS is answered 405: still an answer.
    assert await transport.probe() is True
    assert consumer.received == []


# --- resource bounds ---


async def test_an_endless_answer_is_cut_not_buffered(consumer: Consumer) -> None:
    total = 50 * 1024 * 1024
    chunk = b"x" * 65536
    sent = 0
    finished = asyncio.Event()

    async def flood(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        response = web.StreamResponse(status=200)
        response.content_length = total
        await response.prepare(request)
        try:
            while sent < total:
                await response.write(chunk)
                sent += len(chunk)
        except ConnectionError:
            pass  # the client hung up: that is the point
        finally:
            finished.set()
        return response

    consumer.answer = flood
    sender = HttpTransport(WebhookSpec(consumer.url, max_response_bytes=64 * 1024))
    try:
        started = time.monotonic()
        outcome = await sender.send(DELIVERY, DEADLINE_S)
        elapsed = time.monotonic() - started
    finally:
        await sender.close()

    assert outcome.kind is OutcomeKind.ACK
    assert elapsed < 2.0
    async with asyncio.timeout(5):
        await finished.wait()
    # Only what fits in the socket buffers left the server; the rest was never asked for.
    assert sent < total // 2


async def test_connections_are_pooled_and_limited(consumer: Consumer) -> None:
    sender = HttpTransport(WebhookSpec(consumer.url, max_connections=2))
    try:
        outcomes = await asyncio.gather(*(sender.send(DELIVERY, DEADLINE_S) for _ in range(20)))
        await sender.send(DELIVERY, DEADLINE_S)
    finally:
        await sender.close()

    assert {outcome.kind for outcome in outcomes} == {OutcomeKind.ACK}
    assert len(consumer.received) == 21
    assert len({got.peer_port for got in consumer.received}) <= 2


def test_a_transport_belongs_to_one_event_loop_until_closed(refused_url: str) -> None:
    sender = HttpTransport(WebhookSpec(refused_url))
    with asyncio.Runner() as first, asyncio.Runner() as second:
        assert first.run(sender.probe()) is False
        with pytest.raises(RuntimeError, match="another event loop"):
            second.run(sender.probe())
        first.run(sender.close())
        # Closed in its loop, it reopens in the next one (a new batch's loop).
        assert second.run(sender.probe()) is False
        second.run(sender.close())


def test_a_transport_whose_loop_ended_without_close_starts_afresh(refused_url: str) -> None:
    sender = HttpTransport(WebhookSpec(refused_url))
    # The abandoned session complains (ResourceWarning) whenever it is collected.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        with asyncio.Runner() as crashed:
            assert crashed.run(sender.probe()) is False

        # The old session cannot be closed any more; a new loop simply gets a new one.
        with asyncio.Runner() as next_batch:
            assert next_batch.run(sender.probe()) is False
            next_batch.run(sender.close())
        gc.collect()


async def test_a_consumer_that_dies_on_the_request_makes_it_a_suspect() -> None:
    # Given a server that reads the request and then drops the connection without answering
    # (a consumer process crashing on this very message)
    async def crash(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()

    server = await asyncio.start_server(crash, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = HttpTransport(WebhookSpec(f"http://127.0.0.1:{port}/"))
    try:
        outcome = await transport.send(Delivery(delivery_id("t", 0, 1), "t", 0, 1, None, b"x"), 5)
    finally:
        await transport.close()
        server.close()
        await server.wait_closed()
    # Then no attempt is spent (BACKOFF), and the dispatcher is told to suspect it
    assert outcome.kind is OutcomeKind.BACKOFF and outcome.lost
    assert "consumer lost after sending" in outcome.reason
