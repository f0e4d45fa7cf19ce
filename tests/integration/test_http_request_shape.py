"""The request shape over real sockets: an aiohttp server records each request's method, raw
path and headers, for a single-webhook and a batching transport."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDictProxy

from siding.consumer.webhook import verify_webhook
from siding.model import Delivery, OutcomeKind, delivery_id
from siding.transport.batching import BatchLimits
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.http_batch import HttpBatchTransport
from siding_consumer.envelope import deliveries_from_batch

SECRET = "whsec_" + base64.b64encode(b"r" * 32).decode()
STATIC = (("X-Api-Key", "k3y"), ("X-Team", "billing"))


@dataclass
class Seen:
    method: str
    raw_path: str
    headers: CIMultiDictProxy[str]
    body: bytes


@dataclass
class Server:
    base: str = ""
    seen: list[Seen] = field(default_factory=list)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    app = web.Application()
    test_server = TestServer(app)
    state = Server()

    async def record(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        state.seen.append(Seen(request.method, request.raw_path, request.headers, body))
        if request.method == "OPTIONS":
            return web.Response(status=204)
        if request.content_type == "application/cloudevents-batch+json":
            ids = [d.id for d in deliveries_from_batch(body)]
            results = ",".join(f'{{"id": "{i}", "verdict": "ack"}}' for i in ids)
            return web.Response(text=f'{{"results": [{results}]}}', content_type="application/json")
        return web.Response(status=204)

    app.router.add_route("*", "/{tail:.*}", record)
    await test_server.start_server()
    state.base = str(test_server.make_url("")).rstrip("/")
    try:
        yield state
    finally:
        await test_server.close()


def delivery(key: bytes | None, offset: int = 42, region: bytes = b"eu west") -> Delivery:
    return Delivery(
        id=delivery_id("orders", 3, offset),
        topic="orders",
        partition=3,
        offset=offset,
        key=key,
        value=b'{"total": 5}',
        headers=(("region", region), ("x-api-key", b"forged")),
    )


async def test_a_put_goes_to_the_records_own_url_with_the_static_headers_and_its_key(
    server: Server,
) -> None:
    spec = WebhookSpec(
        server.base + "/orders/{key}?region={header.region}&at={partition}-{offset}",
        secret=SECRET,
        method="PUT",
        headers=STATIC,
    )
    transport = HttpTransport(spec)
    try:
        for key in (b"order 7/a", b"\x00\xff", None):
            outcome = await transport.send(delivery(key), 5.0)
            assert outcome.kind is OutcomeKind.ACK
        assert await transport.probe()
    finally:
        await transport.close()

    *sent, probe = server.seen
    assert [(s.method, s.raw_path) for s in sent] == [
        ("PUT", "/orders/order%207%2Fa?region=eu%20west&at=3-42"),
        ("PUT", "/orders/%00%FF?region=eu%20west&at=3-42"),
        ("PUT", "/orders/?region=eu%20west&at=3-42"),
    ]
    for seen in sent:
        assert seen.headers.getall("X-Api-Key") == ["k3y"]  # the producer's is dropped
        assert seen.headers["X-Team"] == "billing"
        assert seen.headers.getall("Idempotency-Key") == ["orders/3/42"]
        assert verify_webhook(SECRET, seen.headers, seen.body) == "orders/3/42"
    assert transport.dropped_headers == 3
    # The liveness probe asks the URL up to its first placeholder
    assert (probe.method, probe.raw_path) == ("OPTIONS", "/orders/")


async def test_a_template_keeps_the_endpoints_credentials_and_host(server: Server) -> None:
    # Given a URL with a user (basic auth, as aiohttp sends it) and a template in its query
    url = server.base.replace("http://", "http://u:pw@") + "/q?key={key}"
    transport = HttpTransport(WebhookSpec(url))
    try:
        assert (await transport.send(delivery(b"a&b=c"), 5.0)).kind is OutcomeKind.ACK
    finally:
        await transport.close()

    [seen] = server.seen
    assert seen.raw_path == "/q?key=a%26b%3Dc"  # one query value, not two
    assert seen.headers["Authorization"] == "Basic " + base64.b64encode(b"u:pw").decode()


async def test_idempotency_key_off_sends_none_and_post_stays_the_default(server: Server) -> None:
    transport = HttpTransport(WebhookSpec(server.base + "/hook", idempotency_key=False))
    try:
        assert (await transport.send(delivery(b"k"), 5.0)).kind is OutcomeKind.ACK
    finally:
        await transport.close()

    [seen] = server.seen
    assert (seen.method, seen.raw_path) == ("POST", "/hook")
    assert "Idempotency-Key" not in seen.headers


async def test_a_batch_takes_the_method_and_static_headers_but_no_idempotency_key(
    server: Server,
) -> None:
    spec = WebhookSpec(server.base + "/batch", secret=SECRET, method="PATCH", headers=STATIC)
    transport = HttpBatchTransport(spec, limits=BatchLimits(8, 0.05, 1 << 20))
    try:
        outcomes = await asyncio.gather(
            *(transport.send(delivery(b"k", offset=n), 5.0) for n in range(3))
        )
    finally:
        await transport.close()

    assert [o.kind for o in outcomes] == [OutcomeKind.ACK] * 3
    [seen] = server.seen
    assert (seen.method, seen.raw_path) == ("PATCH", "/batch")
    assert (seen.headers["X-Api-Key"], seen.headers["X-Team"]) == ("k3y", "billing")
    assert "Idempotency-Key" not in seen.headers
    assert verify_webhook(SECRET, seen.headers, seen.body) == "batch:orders/3/0:3"
