"""What a webhook request carries and what the answer says, as pure functions (docs/webhooks.md
for one delivery per request, docs/batch.md for the batch envelope).

A request in CloudEvents binary mode is one delivery: the body is the value, the metadata is in
headers. A request with ``content-type: application/cloudevents-batch+json`` is a batch: a JSON
array of structured events, values in base64. A batch is answered ``{"results": [...]}`` with
one entry per delivery.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from siding_consumer.errors import SidingError
from siding_consumer.model import Delivery, Verdict
from siding_consumer.outputs import outputs_to_json
from siding_consumer.reply import Reply

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# Request headers that are siding's own facts or HTTP's, not the record's Kafka headers.
_OURS_PREFIXES = ("ce-", "webhook-", "siding-")
_HTTP_OWN = frozenset(
    {
        "host",
        "user-agent",
        "accept",
        "accept-encoding",
        "content-length",
        "content-type",
        "connection",
        "authorization",
        "transfer-encoding",
    }
)


class EnvelopeError(SidingError):
    """A webhook request is not a delivery siding sends; the message names the bad field."""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """The response to send: status, headers and body."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


def is_batch(content_type: str | None) -> bool:
    """Whether a request with this content type carries a batch."""
    return (content_type or "").split(";")[0].strip().lower() == BATCH_CONTENT_TYPE


def delivery_from_request(headers: Mapping[str, str], body: bytes) -> Delivery:
    """One delivery from a binary-mode request. Over HTTP a tombstone and an empty value look
    alike (an empty body): ``value`` is ``b""`` for both."""
    lowered = {name.lower(): value for name, value in headers.items()}
    delivery_id = lowered.get("ce-id") or lowered.get("webhook-id") or ""
    if not delivery_id:
        raise EnvelopeError("missing header: ce-id")
    key: bytes | None = None
    if "siding-key" in lowered:
        key = _unbase64(lowered["siding-key"], "siding-key")
    elif "ce-subject" in lowered:
        key = lowered["ce-subject"].encode()
    kafka_headers: list[tuple[str, bytes]] = [
        (name, value.encode())
        for name, value in headers.items()
        if name.lower() not in _HTTP_OWN
        and not name.lower().startswith(_OURS_PREFIXES)
        # siding's Idempotency-Key is the delivery id; a producer's own is theirs
        and not (name.lower() == "idempotency-key" and value == delivery_id)
    ]
    content_type = lowered.get("content-type", DEFAULT_CONTENT_TYPE)
    if content_type != DEFAULT_CONTENT_TYPE:
        kafka_headers.append(("content-type", content_type.encode()))
    return Delivery(
        id=delivery_id,
        topic=lowered.get("siding-topic", ""),
        partition=_int(lowered.get("siding-partition", "0"), "siding-partition"),
        offset=_int(lowered.get("siding-offset", "0"), "siding-offset"),
        key=key,
        value=body,
        headers=tuple(kafka_headers),
        timestamp_ms=_timestamp_ms(lowered.get("ce-time"), "ce-time"),
        attempt=_int(lowered.get("siding-attempt", "1"), "siding-attempt"),
        lane=_int(lowered.get("siding-lane", "0"), "siding-lane"),
    )


def deliveries_from_batch(body: bytes) -> list[Delivery]:
    """Every delivery of a batch request, in order; raises ``EnvelopeError`` naming the bad
    event and field."""
    try:
        events = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise EnvelopeError(f"the batch is not JSON: {error}") from None
    if not isinstance(events, list):
        raise EnvelopeError("the batch is not a JSON array of events")
    return [delivery_from_event(event, index) for index, event in enumerate(events)]


def delivery_from_event(event: object, index: int = 0) -> Delivery:
    """One structured-mode CloudEvent of a batch (the ``index``-th, for errors) as a Delivery."""
    if not isinstance(event, Mapping):
        raise EnvelopeError(f"event {index} is not a JSON object")
    where = f"event {index}"
    headers = event.get("sidingheaders", [])
    if not isinstance(headers, list):
        raise EnvelopeError(f"{where}: sidingheaders is not a list")
    return Delivery(
        id=_field(event, "id", str, where),
        topic=_field(event, "sidingtopic", str, where),
        partition=_field(event, "sidingpartition", int, where),
        offset=_field(event, "sidingoffset", int, where),
        key=_bytes(event, "sidingkey", where),
        value=_value(event, where),
        headers=tuple(_header(h, f"{where}: sidingheaders[{n}]") for n, h in enumerate(headers)),
        timestamp_ms=_event_time(event.get("time"), where),
        attempt=_field(event, "sidingattempt", int, where, 1),
        lane=_field(event, "sidinglane", int, where, 0),
    )


def _field(event: Mapping[str, Any], name: str, kind: type, where: str, default: Any = None) -> Any:
    value = event.get(name, default)
    if value is None:
        raise EnvelopeError(f"{where}: {name} is missing")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise EnvelopeError(f"{where}: {name} is not a {kind.__name__}")
    return value


def _decode(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise EnvelopeError(f"{what} is not a base64 string")
    return _unbase64(text, what)


def _bytes(event: Mapping[str, Any], name: str, where: str) -> bytes | None:
    return _decode(event[name], f"{where}: {name}") if name in event else None


def _value(event: Mapping[str, Any], where: str) -> bytes | None:
    if "data_base64" in event:
        return _decode(event["data_base64"], f"{where}: data_base64")
    data = event.get("data")
    if data is None:
        return None  # a tombstone
    # siding always sends data_base64; a hand-made event's text data is taken as UTF-8.
    return data.encode() if isinstance(data, str) else json.dumps(data).encode()


def _header(header: object, where: str) -> tuple[str, bytes]:
    if not isinstance(header, Mapping) or not isinstance(header.get("key"), str):
        raise EnvelopeError(f"{where} is not {{key, value_base64}}")
    return header["key"], _decode(header.get("value_base64"), f"{where}.value_base64")


def _event_time(value: object, where: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, str):
        raise EnvelopeError(f"{where}: time is not a string")
    try:
        return round(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise EnvelopeError(f"{where}: time is not RFC 3339") from None


def _unbase64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"{where} is not valid base64") from None


def _int(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise EnvelopeError(f"{where} is not an integer: {text!r}") from None


def _timestamp_ms(text: object, where: str) -> int:
    if text is None:
        return 0
    if not isinstance(text, str):
        raise EnvelopeError(f"{where} is not an RFC 3339 time: {text!r}")
    try:
        return round(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise EnvelopeError(f"{where} is not an RFC 3339 time: {text!r}") from None


def single_answer(reply: Reply) -> HttpAnswer:
    """The response to a one-delivery request: 200 acks (with a JSON body ``{"outputs": [...]}``
    when the ack carries outputs, docs/outputs.md), 429 (with ``Retry-After``) backs off, 500
    retries from the next lane (its ``after`` cannot be said), 422 dead-letters."""
    reason = reply.reason.encode()
    if reply.verdict is Verdict.ACK and reply.outputs:
        body = json.dumps({"outputs": outputs_to_json(reply.outputs)}, separators=(",", ":"))
        return HttpAnswer(200, (("content-type", "application/json"),), body.encode())
    if reply.verdict is Verdict.ACK:
        return HttpAnswer(200)
    if reply.backoff:
        return HttpAnswer(429, _retry_after(reply.retry_after_s), reason)
    if reply.verdict is Verdict.DEAD:
        return HttpAnswer(422, _TEXT, reason)
    return HttpAnswer(500, _TEXT, reason)


def batch_answer(replies: Iterable[tuple[str, Reply]]) -> HttpAnswer:
    """The response to a batch: one result per delivery id. When every delivery asked to back
    off, the whole batch is answered 429 (siding slows down and spends no attempt); a single
    item's back-off is a retry, since an item has no status of its own."""
    pairs = list(replies)
    if pairs and all(reply.backoff for _, reply in pairs):
        afters = [r.retry_after_s for _, r in pairs if r.retry_after_s is not None]
        return HttpAnswer(429, _retry_after(max(afters) if afters else None), b"back off")
    results = [_result(delivery_id, reply) for delivery_id, reply in pairs]
    body = json.dumps({"results": results}, separators=(",", ":")).encode()
    return HttpAnswer(200, (("content-type", "application/json"),), body)


# Said on every answer of a consumer that reads the batch envelope and streams its results
# when asked: a route without a ``batch`` key then sends it batches (siding's docs/batch.md).
READS_BATCHES = ("siding-batch", "v1")
# A batch's results streamed as they finish, one JSON object per line (siding asks for it with
# ``accept``): a slow delivery no longer holds back its batch-mates' answers.
RESULT_STREAM_TYPE = "application/x-ndjson"


def accepts_result_stream(headers: Mapping[str, str]) -> bool:
    """Whether the request's sender reads a batch's results as a stream (``accept``)."""
    accept = next((v for k, v in headers.items() if k.lower() == "accept"), "")
    types = (part.split(";")[0].strip().lower() for part in accept.split(","))
    return RESULT_STREAM_TYPE in types


def result_line(delivery_id: str, reply: Reply) -> bytes:
    """One delivery's result as a line of the stream."""
    return json.dumps(_result(delivery_id, reply), separators=(",", ":")).encode() + b"\n"


def _result(delivery_id: str, reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {"id": delivery_id, "verdict": reply.verdict.value}
    if reply.verdict is Verdict.ACK and reply.outputs:
        out["outputs"] = outputs_to_json(reply.outputs)
    if reply.verdict is Verdict.RETRY and reply.retry_after_s is not None:
        out["after"] = reply.retry_after_s
    if reply.reason:
        out["reason"] = reply.reason
    return out


_TEXT = (("content-type", "text/plain; charset=utf-8"),)


def _retry_after(after_s: float | None) -> tuple[tuple[str, str], ...]:
    if after_s is None:
        return _TEXT
    return (*_TEXT, ("retry-after", str(math.ceil(after_s))))
