"""The webhook transport carries siding's attempt span to a real HTTP server on 127.0.0.1: the
consumer's ``traceparent`` header names siding's span, in the producer's trace."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from siding.model import Delivery, OutcomeKind, delivery_id
from siding.tracing.calls import TracedTransport
from siding.transport.http import HttpTransport, WebhookSpec

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
async def received() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def hook(request: web.Request) -> web.StreamResponse:
        await request.read()
        seen.append({k.lower(): v for k, v in request.headers.items()})
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("/hook")), seen
    finally:
        await server.close()


async def test_the_webhook_request_carries_the_attempt_span_as_traceparent(
    received: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = received
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    http = HttpTransport(WebhookSpec(url))
    traced = TracedTransport(http, provider.get_tracer("test"), "billing", "billing-group")
    headers = (
        ("traceparent", f"00-{TRACE}-{PRODUCER_SPAN}-01".encode()),
        ("tracestate", b"vendor=1"),
        ("app", b"x"),
    )
    delivery = Delivery(delivery_id("orders", 0, 5), "orders", 0, 5, b"k", b"v", headers)
    try:
        outcome = await traced.send(delivery, 5.0)
    finally:
        await http.close()
    assert outcome.kind is OutcomeKind.ACK
    (span,) = memory.get_finished_spans()
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PRODUCER_SPAN
    (request,) = seen
    assert request["traceparent"] == f"00-{TRACE}-{span.context.span_id:016x}-01"
    assert request["tracestate"] == "vendor=1"
    assert request["app"] == "x"  # the producer's other headers go on as before
