"""The ASGI webhook app driven by hand: verification, one delivery per request, batches."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import time
from collections.abc import MutableMapping
from typing import Any

import pytest

from siding_consumer import (
    BodyEncodingError,
    ConfigError,
    Delivery,
    Reply,
    WebhookApp,
    WebhookVerifier,
    ack,
    current_call,
    dead,
    decode_body,
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
    app: WebhookApp,
    headers: dict[str, str],
    body: bytes,
    method: str = "POST",
    path: str = "/",
    *,
    answer_headers: dict[bytes, bytes] | None = None,
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
    if answer_headers is not None:
        answer_headers.update(sent[0]["headers"])
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


# --- bodies siding compressed (Content-Encoding: gzip; signed before compressing) ---------------

VALUE = b'{"order": 1, "items": ["a", "b", "c"]}' * 40


async def echo(d: Delivery) -> Reply:
    return dead((d.value or b"")[:12].decode())  # the handler's view of the value, in the answer


async def test_a_gzip_body_is_decoded_then_verified_and_handled() -> None:
    app = WebhookApp(echo, SECRET)
    headers = signed("t/0/1", VALUE, **{"ce-id": "t/0/1", "content-encoding": "gzip"})
    assert await call(app, headers, gzip.compress(VALUE)) == (422, VALUE[:12])


@pytest.mark.parametrize(
    ("encoding", "body", "status", "fragment"),
    [
        ("br", b"x", 415, b"'br' is not supported"),
        ("gzip", b"not gzip at all", 400, b"does not decode"),
        ("gzip", gzip.compress(VALUE)[:-6], 400, b"cut short"),
        ("gzip", gzip.compress(b"\0" * 100_000), 413, b"larger than 65536 bytes decoded"),
    ],
    ids=["unknown", "broken", "truncated", "bomb"],
)
async def test_a_body_that_cannot_be_decoded_is_refused_without_the_handler(
    encoding: str, body: bytes, status: int, fragment: bytes
) -> None:
    app = WebhookApp(echo, SECRET, max_body_bytes=65_536)
    headers = signed("t/0/1", b"", **{"ce-id": "t/0/1", "content-encoding": encoding})
    got_status, text = await call(app, headers, body)
    assert got_status == status
    assert fragment in text


def test_decode_body_leaves_a_plain_body_alone() -> None:
    assert decode_body({"Content-Type": "application/json"}, VALUE, 10) is VALUE
    assert decode_body({"Content-Encoding": "GZIP"}, gzip.compress(VALUE), 10_000) == VALUE
    with pytest.raises(BodyEncodingError) as caught:
        decode_body({"content-encoding": "deflate"}, VALUE, 10_000)
    assert caught.value.status == 415


async def test_the_verifier_hands_the_app_the_decoded_body_marked_as_such() -> None:
    seen: dict[str, Any] = {}

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen["headers"] = dict(scope["headers"])
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    verifier = WebhookVerifier(inner, SECRET)
    headers = signed("t/0/1", VALUE, **{"content-encoding": "gzip", "content-length": "99"})
    status, _ = await call(verifier, headers, gzip.compress(VALUE))  # type: ignore[arg-type]
    assert status == 204
    assert seen["body"] == VALUE
    assert b"content-encoding" not in seen["headers"]
    assert seen["headers"][b"content-length"] == str(len(VALUE)).encode()


async def test_every_answer_of_the_handler_says_the_app_reads_batches() -> None:
    # siding sends an HTTP route's deliveries in batches only to a consumer that says so.
    app = WebhookApp(by_key, SECRET)
    single: dict[bytes, bytes] = {}
    headers = signed("t/0/1", b"v", **{"ce-id": "t/0/1", "ce-subject": "dead"})
    assert (await call(app, headers, b"v", answer_headers=single))[0] == 422
    body = json.dumps([{"id": "t/0/0", "sidingtopic": "t", "sidingpartition": 0,
                        "sidingoffset": 0, "data_base64": "AA=="}]).encode()  # fmt: skip
    batch: dict[bytes, bytes] = {}
    batch_headers = signed(
        "batch:t/0/0:1", body, **{"content-type": "application/cloudevents-batch+json"}
    )
    assert (await call(app, batch_headers, body, answer_headers=batch))[0] == 200
    assert single[b"siding-batch"] == batch[b"siding-batch"] == b"v1"


async def test_a_batch_asked_as_a_stream_is_answered_line_by_line_as_each_finishes() -> None:
    # The slow delivery finishes last, whatever its place: its line comes last, and the fast
    # ones' lines left before it finished (siding settles each as its line comes).
    release = asyncio.Event()
    lines_before_release: list[bytes] = []

    async def handler(d: Delivery) -> Reply:
        if d.key == b"slow":
            await release.wait()
        return dead("poison") if d.key == b"dead" else ack()

    events = [
        {"id": f"t/0/{n}", "sidingtopic": "t", "sidingpartition": 0, "sidingoffset": n,
         "sidingkey": base64.b64encode(k).decode(), "data_base64": ""}
        for n, k in enumerate([b"slow", b"ok", b"dead"])
    ]  # fmt: skip
    body = json.dumps(events).encode()
    headers = signed(
        "batch:t/0/0:3",
        body,
        **{"content-type": "application/cloudevents-batch+json",
           "accept": "application/x-ndjson, application/json"},
    )  # fmt: skip
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))
        if message.get("body"):
            lines_before_release.extend(message["body"].splitlines())
            if len(lines_before_release) == 2:
                release.set()  # only once the fast ones were written

    await asyncio.wait_for(WebhookApp(handler, SECRET)(scope, receive, send), timeout=5)
    start = sent[0]
    assert start["status"] == 200
    assert dict(start["headers"])[b"content-type"] == b"application/x-ndjson"
    assert dict(start["headers"])[b"siding-batch"] == b"v1"
    results = [json.loads(line) for line in lines_before_release]
    assert [r["id"] for r in results][2] == "t/0/0"  # the slow one last
    assert sorted((r["id"], r["verdict"]) for r in results) == [
        ("t/0/0", "ack"), ("t/0/1", "ack"), ("t/0/2", "dead"),
    ]  # fmt: skip
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_batch_not_asked_as_a_stream_gets_one_json_answer() -> None:
    # An older siding does not ask for the stream: it gets the one answer it reads.
    body = json.dumps([{"id": "t/0/0", "sidingtopic": "t", "sidingpartition": 0,
                        "sidingoffset": 0, "data_base64": ""}]).encode()  # fmt: skip
    headers = signed(
        "batch:t/0/0:1", body, **{"content-type": "application/cloudevents-batch+json"}
    )
    status, answer = await call(WebhookApp(by_key, SECRET), headers, body)
    assert status == 200
    assert json.loads(answer) == {"results": [{"id": "t/0/0", "verdict": "ack"}]}
