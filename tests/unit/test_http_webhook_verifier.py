"""The consumer-side verifier: a function, and an ASGI middleware driven by hand."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from siding.consumer.webhook import (
    Message,
    Receive,
    Scope,
    Send,
    WebhookVerificationError,
    WebhookVerifier,
    verify_webhook,
)
from siding.errors import ConfigError
from siding.transport.signing import sign

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
BODY = b'{"fare": 12.5}'


def signed_headers(body: bytes = BODY, timestamp_s: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if timestamp_s is None else timestamp_s
    return {
        "Webhook-Id": "trips/3/42",
        "Webhook-Timestamp": str(ts),
        "Webhook-Signature": sign(SECRET, "trips/3/42", ts, body),
    }


def test_verify_webhook_returns_the_delivery_id() -> None:
    assert verify_webhook(SECRET, signed_headers(), BODY) == "trips/3/42"


def test_verify_webhook_refuses_a_stale_request() -> None:
    with pytest.raises(WebhookVerificationError, match="old"):
        verify_webhook(SECRET, signed_headers(timestamp_s=1_000), BODY, tolerance_s=60)


class Recorder:
    """A tiny ASGI app: records what it was given and answers 204."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        if scope["type"] == "http":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            self.bodies.append(body)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def drive(
    app: WebhookVerifier,
    headers: dict[str, str],
    chunks: list[bytes],
    *,
    disconnect_early: bool = False,
) -> list[Message]:
    """Run one HTTP request through ``app``; return what it sent."""
    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": "/hook",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    incoming: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    if disconnect_early:
        incoming = incoming[:1]
    incoming.append({"type": "http.disconnect"})
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def status_of(sent: list[Message]) -> int:
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1
    status: int = starts[0]["status"]
    return status


async def test_a_signed_request_reaches_the_app_with_its_body_replayed() -> None:
    app = Recorder()
    middleware = WebhookVerifier(app, SECRET)

    sent = await drive(middleware, signed_headers(), [BODY[:5], BODY[5:]])

    assert status_of(sent) == 204
    assert app.bodies == [BODY]


@pytest.mark.parametrize(
    ("case", "why"),
    [("tampered-body", "signature"), ("stale", "old"), ("unsigned", "missing header")],
)
async def test_a_bad_request_gets_401_and_never_reaches_the_app(case: str, why: str) -> None:
    app = Recorder()
    headers = {
        "tampered-body": signed_headers(body=BODY + b" "),
        "stale": signed_headers(timestamp_s=1_000),
        "unsigned": {},
    }[case]

    sent = await drive(WebhookVerifier(app, SECRET), headers, [BODY])

    assert status_of(sent) == 401
    assert why in b"".join(m.get("body", b"") for m in sent).decode()
    assert app.calls == 0


async def test_an_oversized_body_gets_413_and_never_reaches_the_app() -> None:
    app = Recorder()
    middleware = WebhookVerifier(app, SECRET, max_body_bytes=8)

    sent = await drive(middleware, signed_headers(), [BODY[:5], BODY[5:]])

    assert status_of(sent) == 413
    assert app.calls == 0


async def test_a_client_that_goes_away_mid_body_gets_nothing() -> None:
    app = Recorder()

    sent = await drive(
        WebhookVerifier(app, SECRET), signed_headers(), [b"a", b"b"], disconnect_early=True
    )

    assert sent == []
    assert app.calls == 0


async def test_other_scopes_pass_straight_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, _receive: Receive, _send: Send) -> None:
        seen.append(scope["type"])

    async def receive() -> dict[str, Any]:
        raise AssertionError("the middleware must not read a lifespan scope")

    async def send(_message: Message) -> None:
        raise AssertionError("the middleware must not answer a lifespan scope")

    await WebhookVerifier(app, SECRET)({"type": "lifespan"}, receive, send)

    assert seen == ["lifespan"]


def test_a_bad_secret_fails_when_the_middleware_is_built() -> None:
    with pytest.raises(ConfigError):
        WebhookVerifier(Recorder(), "whsec_***")
