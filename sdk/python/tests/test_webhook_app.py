"""The ASGI webhook app driven by hand: verification, one delivery per request, batches."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import MutableMapping
from typing import Any

import pytest

from siding_consumer import (
    ConfigError,
    Delivery,
    Reply,
    WebhookApp,
    ack,
    current_call,
    dead,
    retry,
)
from siding_consumer.signing import sign

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


async def by_key(d: Delivery) -> Reply:
    if d.key == b"dead":
        return dead("poison")
    if d.key == b"call":
        return dead(current_call())
    if d.key == b"retry":
        return retry(5, "later")
    return ack()


async def call(
    app: WebhookApp, headers: dict[str, str], body: bytes, method: str = "POST", path: str = "/"
) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def signed(msg_id: str, body: bytes, **extra: str) -> dict[str, str]:
    now = int(time.time())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(now),
        "webhook-signature": sign(SECRET, msg_id, now, body),
        **extra,
    }


async def test_a_single_delivery_is_verified_and_answered_by_status() -> None:
    app = WebhookApp(by_key, SECRET)
    ok = signed("t/0/1", b"v", **{"ce-id": "t/0/1", "ce-subject": "dead"})
    assert await call(app, ok, b"v") == (422, b"poison")
    which = signed("t/0/1", b"v", **{"ce-id": "t/0/1", "ce-subject": "call"})
    assert await call(app, which, b"v") == (422, b"webhook")
    forged = {**ok, "webhook-signature": "v1,AAAA"}
    status, body = await call(app, forged, b"v")
    assert status == 401
    assert b"no webhook-signature matches" in body


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_a_route_that_puts_to_a_path_with_the_key_is_answered_too(method: str) -> None:
    app = WebhookApp(by_key, SECRET)
    headers = signed("t/0/1", b"v", **{"ce-id": "t/0/1", "ce-subject": "dead"})

    assert await call(app, headers, b"v", method, "/orders/dead") == (422, b"poison")


@pytest.mark.parametrize(("method", "status"), [("GET", 405), ("DELETE", 405), ("OPTIONS", 204)])
async def test_other_methods_are_not_deliveries(method: str, status: int) -> None:
    assert (await call(WebhookApp(by_key), {"ce-id": "t/0/1"}, b"", method))[0] == status


async def test_a_batch_is_answered_per_delivery() -> None:
    events = [
        {
            "id": f"t/0/{n}",
            "sidingtopic": "t",
            "sidingpartition": 0,
            "sidingoffset": n,
            "sidingkey": base64.b64encode(k).decode(),
            "data_base64": "AP8=",
        }
        for n, k in enumerate([b"ok", b"dead", b"retry", b"call"])
    ]
    body = json.dumps(events).encode()
    headers = signed(
        "batch:t/0/0:4", body, **{"content-type": "application/cloudevents-batch+json"}
    )
    status, answer = await call(WebhookApp(by_key, SECRET), headers, body)
    assert status == 200
    assert json.loads(answer)["results"] == [
        {"id": "t/0/0", "verdict": "ack"},
        {"id": "t/0/1", "verdict": "dead", "reason": "poison"},
        {"id": "t/0/2", "verdict": "retry", "after": 5, "reason": "later"},
        {"id": "t/0/3", "verdict": "dead", "reason": "webhook-batch"},
    ]


async def test_a_request_siding_would_not_send_is_a_400_naming_the_field() -> None:
    headers = {"content-type": "application/cloudevents-batch+json"}
    status, body = await call(WebhookApp(by_key), headers, b'[{"id": 3}]')
    assert (status, body) == (400, b"event 0: id is not a str")


def test_a_bad_secret_fails_at_startup() -> None:
    with pytest.raises(ConfigError, match="whsec_"):
        WebhookApp(by_key, "whsec_%%%")
