"""Compression on the wire: the pure decisions (compress or not, the headers that say so), the
route's keys reaching the transports, and real gRPC and HTTP servers decoding what siding sends."""

from __future__ import annotations

import asyncio
import base64
import gzip
from collections.abc import AsyncIterator

import grpc
import pytest
from aiohttp import web

from siding.config import parse_config
from siding.consumer import (
    ConsumerServer,
    Reply,
    ack,
    answer_batch,
    batch_answer,
    deliveries_from_batch,
    is_batch,
    verify_webhook,
)
from siding.devkit.wire_relay import WireRelay
from siding.model import Delivery, OutcomeKind
from siding.transport.base import Transport
from siding.transport.batching import BatchLimits
from siding.transport.compression import (
    OFF,
    Compression,
    already_encoded,
    compresses,
    http_body,
    refused_encoding,
)
from siding.transport.factory import channel_spec, webhook_spec
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.grpc_common import ChannelSpec, call_compression, stream_compression
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.http_batch import HttpBatchTransport

GZIP = Compression("gzip", 1024)
SECRET = "whsec_" + base64.b64encode(b"compression-unit-secret-0123456").decode()
JSON = b'{"sku": "SKU-0001", "qty": 1, "price": "19.99"}, ' * 90  # 4.5 KB, compressible


# --- the pure decisions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "size", "expected"),
    [
        (OFF, 10_000, False),
        (GZIP, 1023, False),
        (GZIP, 1024, True),
        (GZIP, 10_000, True),
        (Compression("gzip", 0), 0, True),
    ],
)
def test_a_body_is_compressed_from_the_threshold_up_and_only_when_on(
    choice: Compression, size: int, expected: bool
) -> None:
    assert compresses(choice, size) is expected


def test_a_large_body_goes_gzipped_with_its_content_encoding() -> None:
    body = http_body(GZIP, JSON)
    assert body.headers == (("content-encoding", "gzip"),)
    assert len(body.data) < len(JSON) / 4
    assert gzip.decompress(body.data) == JSON
    assert http_body(GZIP, JSON).data == body.data  # no clock in the bytes


@pytest.mark.parametrize(
    ("choice", "value", "encoded"),
    [(OFF, JSON, False), (GZIP, b"{}", False), (GZIP, JSON, True)],
    ids=["off", "small", "already encoded"],
)
def test_other_bodies_go_as_they_are_without_the_header(
    choice: Compression, value: bytes, encoded: bool
) -> None:
    headers = (("Content-Encoding", b"br"),) if encoded else (("trace", b"1"),)
    body = http_body(choice, value, headers)
    assert (body.data, body.headers) == (value, ())


def test_only_a_415_to_a_gzipped_body_refuses_the_compression() -> None:
    zipped, plain = http_body(GZIP, JSON), http_body(OFF, JSON)
    assert refused_encoding(415, zipped)
    assert not refused_encoding(415, plain)  # a 415 about something else: the answer stands
    assert not refused_encoding(400, zipped)


def test_a_record_is_already_encoded_when_its_kafka_headers_say_so() -> None:
    assert already_encoded((("Content-Encoding", b"br"),))
    assert not already_encoded((("content-type", b"application/json"),))


def test_grpc_calls_compress_from_the_threshold_and_streams_whole() -> None:
    assert call_compression(GZIP, 2048) is grpc.Compression.Gzip
    assert call_compression(GZIP, 100) is None
    assert call_compression(OFF, 2048) is None
    assert stream_compression(GZIP) is grpc.Compression.Gzip
    assert stream_compression(OFF) is None


def test_the_route_keys_reach_both_transports() -> None:
    text = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "g"
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:50051"
compression = "gzip"
compress_above = 64
[[route]]
name = "h"
topic = "t2"
group = "h"
endpoint = "http://127.0.0.1:8080/hook"
"""
    grpc_route, http_route = parse_config(text, env={}).routes
    assert channel_spec(grpc_route, grpc_route.endpoint[0]).compression == Compression("gzip", 64)
    assert webhook_spec(http_route, http_route.endpoint[0], 10).compression == OFF


# --- real servers decode what siding sends -------------------------------------------------


def deliveries(count: int) -> list[Delivery]:
    return [Delivery(f"t/0/{n}", "t", 0, n, key=None, value=JSON) for n in range(count)]


GRPC_KINDS = ["unary", "stream", "batch"]


def grpc_transport(kind: str, spec: ChannelSpec) -> Transport:
    if kind == "unary":
        return GrpcUnaryTransport(spec)
    if kind == "stream":
        return GrpcStreamTransport(spec)
    return GrpcBatchTransport(spec, limits=BatchLimits(8, 0.005, 4 * 1024 * 1024))


async def sent_over_grpc(kind: str, choice: Compression, got: list[bytes]) -> int:
    """Send 8 deliveries to the SDK's server through a relay; the bytes that went up."""

    async def handle(d: Delivery) -> Reply:
        got.append(d.value or b"")
        return ack()

    async with ConsumerServer(handle, listen="127.0.0.1:0") as server:
        relay = await WireRelay(server.target).start()
        client = grpc_transport(kind, ChannelSpec(relay.target, compression=choice))
        try:
            outcomes = await asyncio.gather(*(client.send(d, 5) for d in deliveries(8)))
        finally:
            await client.close()
            await relay.stop()
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}
    return relay.count.up


@pytest.mark.parametrize("kind", GRPC_KINDS)
async def test_the_sdks_grpc_server_takes_gzip_calls_and_fewer_bytes_cross(kind: str) -> None:
    got_plain: list[bytes] = []
    got_zipped: list[bytes] = []
    plain = await sent_over_grpc(kind, OFF, got_plain)
    zipped = await sent_over_grpc(kind, GZIP, got_zipped)
    assert got_plain == got_zipped == [JSON] * 8
    assert plain > 8 * len(JSON)
    assert zipped < plain / 4, (zipped, plain)


async def handle_ack(d: Delivery) -> Reply:  # noqa: ARG001
    return ack()


class Webhooks:
    """An aiohttp consumer (its server decodes gzip bodies) that checks each signature against
    the decoded body and notes (content-encoding, bytes on the wire) per request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str | None, int]] = []
        self.bodies: list[bytes] = []
        self.refuse_gzip = False

    async def hook(self, request: web.Request) -> web.Response:
        if self.refuse_gzip and "content-encoding" in request.headers:
            self.requests.append((request.headers["content-encoding"], -415))
            return web.Response(status=415, text="no content-encoding here")
        body = await request.read()
        verify_webhook(SECRET, dict(request.headers), body)
        self.requests.append((request.headers.get("content-encoding"), request.content_length or 0))
        self.bodies.append(body)
        if is_batch(request.headers.get("content-type")):
            answer = await answer_batch(handle_ack, deliveries_from_batch(body))
            return web.Response(body=batch_answer(answer), content_type="application/json")
        return web.Response(status=200)


@pytest.fixture
async def webhooks() -> AsyncIterator[tuple[str, Webhooks]]:
    consumer = Webhooks()
    app = web.Application()
    app.router.add_post("/hook", consumer.hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook", consumer
    await runner.cleanup()


async def test_a_signed_webhook_goes_gzipped_and_verifies_once_decoded(
    webhooks: tuple[str, Webhooks],
) -> None:
    url, consumer = webhooks
    sender = HttpTransport(WebhookSpec(url, secret=SECRET, compression=GZIP))
    small = Delivery("t/0/9", "t", 0, 9, key=None, value=b'{"n": 9}')
    try:
        outcomes = [await sender.send(d, 5) for d in (*deliveries(1), small)]
    finally:
        await sender.close()
    assert [o.kind for o in outcomes] == [OutcomeKind.ACK, OutcomeKind.ACK]
    [(encoding, wire), small_request] = consumer.requests
    assert encoding == "gzip" and wire < len(JSON) / 4
    assert small_request == (None, len(small.value or b""))
    assert consumer.bodies == [JSON, small.value]


async def test_a_batch_of_webhooks_goes_gzipped_as_one_body(
    webhooks: tuple[str, Webhooks],
) -> None:
    url, consumer = webhooks
    limits = BatchLimits(8, 0.005, 4 * 1024 * 1024)
    sender = HttpBatchTransport(WebhookSpec(url, secret=SECRET, compression=GZIP), limits=limits)
    try:
        outcomes = await asyncio.gather(*(sender.send(d, 5) for d in deliveries(8)))
    finally:
        await sender.close()
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}
    assert consumer.requests and all(enc == "gzip" for enc, _ in consumer.requests)
    assert sum(wire for _, wire in consumer.requests) < sum(map(len, consumer.bodies)) / 4


async def test_a_consumer_that_refuses_gzip_gets_the_same_deliveries_uncompressed(
    webhooks: tuple[str, Webhooks], caplog: pytest.LogCaptureFixture
) -> None:
    url, consumer = webhooks
    consumer.refuse_gzip = True
    single = HttpTransport(WebhookSpec(url, secret=SECRET, compression=GZIP))
    limits = BatchLimits(8, 0.005, 4 * 1024 * 1024)
    batched = HttpBatchTransport(WebhookSpec(url, secret=SECRET, compression=GZIP), limits=limits)
    try:
        first = [await single.send(d, 5) for d in deliveries(2)]
        batch = await asyncio.gather(*(batched.send(d, 5) for d in deliveries(4)))
    finally:
        await single.close()
        await batched.close()
    # Then every delivery was acked (none dead-lettered for the consumer's encoding), each
    # transport met one refusal, said so once, and sent uncompressed from then on
    assert {o.kind for o in (*first, *batch)} == {OutcomeKind.ACK}
    refusals = [r for r in consumer.requests if r[1] == -415]
    assert len(refusals) == 2
    assert consumer.requests[0][1] == -415 and consumer.requests[1][0] is None
    assert consumer.requests[2][0] is None  # the second single send: no gzip tried again
    assert consumer.bodies.count(JSON) == 2
    assert single.compression == batched.compression == OFF
    assert len([r for r in caplog.records if "answered 415 to a gzipped body" in r.message]) == 2
