"""For webhook consumers: check that a request really comes from siding before trusting it, and
answer it with a handler (an ASGI app)."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from siding_consumer.encoding import BodyEncodingError, decode_body, without_encoding
from siding_consumer.envelope import (
    READS_BATCHES,
    RESULT_STREAM_TYPE,
    EnvelopeError,
    HttpAnswer,
    accepts_result_stream,
    batch_answer,
    deliveries_from_batch,
    delivery_from_request,
    is_batch,
    result_line,
    single_answer,
)
from siding_consumer.model import Delivery
from siding_consumer.reply import CALL, Handler, Reply, call_handler
from siding_consumer.signing import (
    DEFAULT_TOLERANCE_S,
    WebhookVerificationError,
    secret_key,
    verify,
)

__all__ = [
    "BodyEncodingError",
    "WebhookApp",
    "WebhookVerificationError",
    "WebhookVerifier",
    "decode_body",
    "verify_webhook",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# A route may send with any of these ([route.http] method), to any path of the server.
_METHODS = ("POST", "PUT", "PATCH")


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now_s: float | None = None,
) -> str:
    """Verify a siding webhook (Standard Webhooks) and return its ``webhook-id``: the delivery
    id, or ``batch:<id of the first delivery>:<count>`` for a batch (docs/batch.md).

    ``body`` must be the request body byte for byte, decoded when siding compressed it
    (``Content-Encoding: gzip``; ``decode_body`` does it): siding signs the body before it
    compresses it. Header names are case-insensitive.
    Raises ``WebhookVerificationError`` naming what is wrong.
    """
    return verify(secret, headers, body, tolerance_s=tolerance_s, now_s=now_s)


class WebhookVerifier:
    """ASGI middleware: answers 401 to a request whose signature does not verify, without
    calling the app; otherwise hands the app the request with its body replayed.

    The body is buffered to verify it; a body over ``max_body_bytes`` is answered 413.
    """

    def __init__(
        self,
        app: ASGIApp,
        secret: str,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        secret_key(secret)  # fail at startup, not on the first request
        self._app = app
        self._secret = secret
        self._tolerance_s = tolerance_s
        self._max_body_bytes = max_body_bytes

    def __repr__(self) -> str:
        return f"WebhookVerifier({self._app!r})"  # never the secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        body = await _read_body(receive, self._max_body_bytes)
        if body is _Cut.TOO_LARGE:
            await _answer(send, 413, b"request body too large")
            return
        if body is _Cut.DISCONNECTED:
            return
        headers = _headers(scope)
        raw = body
        try:
            body = decode_body(headers, raw, self._max_body_bytes)
        except BodyEncodingError as error:
            await _answer(send, error.status, str(error).encode())
            return
        try:
            verify(
                self._secret,
                headers,
                body,
                tolerance_s=self._tolerance_s,
                now_s=time.time(),
            )
        except WebhookVerificationError as error:
            await _answer(send, 401, f"webhook verification failed: {error}".encode())
            return
        if body is not raw:  # the app behind gets the decoded body, marked as such
            scope = {**scope, "headers": without_encoding(list(scope["headers"]), len(body))}
        await self._app(scope, _replay(body, receive), send)


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in reversed(scope.get("headers", []))  # first one wins
    }


class _Cut(enum.Enum):
    """Why a request body was not read to its end."""

    TOO_LARGE = "too large"
    DISCONNECTED = "disconnected"


async def _read_body(receive: Receive, limit: int) -> bytes | _Cut:
    """The whole request body, or why it could not be had."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _Cut.DISCONNECTED
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return _Cut.TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # whatever comes next (http.disconnect)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _answer(send: Send, status: int, text: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(text)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": text, "more_body": False})


class WebhookApp:
    """An ASGI app that answers siding's webhooks with a handler: one delivery per request
    (binary mode; ``POST``, ``PUT`` or ``PATCH`` to any path) or a batch
    (``application/cloudevents-batch+json``, every delivery handled at once). With a
    ``secret``, a request whose signature does not verify is answered 401 without calling the
    handler. Run it under any ASGI server (uvicorn, hypercorn, ...)."""

    def __init__(
        self,
        handler: Handler,
        secret: str | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        if secret is not None:
            secret_key(secret)  # fail at startup, not on the first request
        self._handler = handler
        self._secret = secret
        self._tolerance_s = tolerance_s
        self._max_body_bytes = max_body_bytes

    def __repr__(self) -> str:
        return f"WebhookApp({self._handler!r})"  # never the secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope.get("method") not in _METHODS:
            await _answer(send, 405 if scope.get("method") != "OPTIONS" else 204, b"")
            return
        body = await _read_body(receive, self._max_body_bytes)
        if body is _Cut.TOO_LARGE:
            await _answer(send, 413, b"request body too large")
            return
        if body is _Cut.DISCONNECTED:
            return
        headers = _headers(scope)
        try:
            body = decode_body(headers, body, self._max_body_bytes)
        except BodyEncodingError as error:
            await _answer(send, error.status, str(error).encode())
            return
        headers = {k: v for k, v in headers.items() if k.lower() != "content-encoding"}
        if self._secret is not None:
            try:
                verify(self._secret, headers, body, tolerance_s=self._tolerance_s)
            except WebhookVerificationError as error:
                await _answer(send, 401, f"webhook verification failed: {error}".encode())
                return
        try:
            if _streams(headers):
                await _stream(send, self._handler, deliveries_from_batch(body))
                return
            answer = await self._respond(headers, body)
        except EnvelopeError as error:
            # A request siding would never send: not a reason to dead-letter anything.
            await _answer(send, 400, str(error).encode())
            return
        await _send(send, answer)

    async def _respond(self, headers: Mapping[str, str], body: bytes) -> HttpAnswer:
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
        if not is_batch(content_type):
            CALL.set("webhook")
            delivery = delivery_from_request(headers, body)
            return single_answer(await call_handler(self._handler, delivery))
        CALL.set("webhook-batch")  # gather's tasks inherit it
        deliveries = deliveries_from_batch(body)
        replies = await asyncio.gather(*(call_handler(self._handler, d) for d in deliveries))
        return batch_answer(zip((d.id for d in deliveries), replies, strict=True))


# Said on every answer of the handler (``envelope.READS_BATCHES``).
_SAID = (READS_BATCHES[0].encode(), READS_BATCHES[1].encode())


def _streams(headers: Mapping[str, str]) -> bool:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    return is_batch(content_type) and accepts_result_stream(headers)


async def _stream(send: Send, handler: Handler, deliveries: list[Delivery]) -> None:
    """A batch answered as it finishes: one line per delivery, written when its handler is
    done, so a slow delivery holds back no other's answer."""
    CALL.set("webhook-batch")  # the tasks inherit it
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", RESULT_STREAM_TYPE.encode()), _SAID],
    })  # fmt: skip
    calls: dict[asyncio.Future[Reply], str] = {
        asyncio.ensure_future(call_handler(handler, d)): d.id for d in deliveries
    }
    waiting: set[asyncio.Future[Reply]] = set(calls)
    try:
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            lines = b"".join(result_line(calls[call], call.result()) for call in done)
            await send({"type": "http.response.body", "body": lines, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        for call in waiting:
            call.cancel()


async def _send(send: Send, answer: HttpAnswer) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    headers.append((b"content-length", str(len(answer.body)).encode()))
    headers.append(_SAID)
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body, "more_body": False})
