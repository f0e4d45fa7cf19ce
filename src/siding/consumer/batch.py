"""For webhook consumers of a batched route: read siding's batch envelope and answer it per
delivery (docs/batch.md). Verify the request first, as any webhook (``verify_webhook``).

    if is_batch(request.headers.get("content-type")):
        deliveries = deliveries_from_batch(raw_body)
        results = await answer_batch(handle, deliveries)
        return 200, {"content-type": "application/json"}, batch_answer(results)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from siding.consumer.reply import Handler, handle
from siding.errors import SidingError
from siding.model import Delivery, Result, Verdict

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
ANSWER_CONTENT_TYPE = "application/json"


class BatchEnvelopeError(SidingError):
    """A request body that is not a batch envelope as siding sends it (answer it 400)."""


def is_batch(content_type: str | None) -> bool:
    """Whether a request's ``content-type`` says it is a batch (CloudEvents batched mode)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == BATCH_CONTENT_TYPE


def deliveries_from_batch(body: bytes) -> list[Delivery]:
    """The deliveries of a batch request's raw body, in order, values byte for byte."""
    try:
        events = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise BatchEnvelopeError(f"the batch is not JSON: {error}") from None
    if not isinstance(events, list):
        raise BatchEnvelopeError("the batch is not a JSON array of events")
    return [delivery_from_event(event, n) for n, event in enumerate(events)]


def delivery_from_event(event: object, index: int = 0) -> Delivery:
    """One structured-mode CloudEvent of a batch as a ``Delivery``."""
    if not isinstance(event, Mapping):
        raise BatchEnvelopeError(f"event {index} is not a JSON object")
    where = f"event {index}"
    headers = event.get("sidingheaders", [])
    if not isinstance(headers, list):
        raise BatchEnvelopeError(f"{where}: sidingheaders is not a list")
    return Delivery(
        id=_field(event, "id", str, where),
        topic=_field(event, "sidingtopic", str, where),
        partition=_field(event, "sidingpartition", int, where),
        offset=_field(event, "sidingoffset", int, where),
        key=_bytes(event, "sidingkey", where),
        value=_value(event, where),
        headers=tuple(_header(h, f"{where}: sidingheaders[{n}]") for n, h in enumerate(headers)),
        timestamp_ms=_timestamp_ms(event.get("time"), where),
        attempt=_field(event, "sidingattempt", int, where, 1),
        lane=_field(event, "sidinglane", int, where, 0),
    )


def batch_answer(results: Iterable[Result]) -> bytes:
    """The JSON body that answers a batch: one result per delivery (``{"results": [...]}``)."""
    items: list[dict[str, Any]] = []
    for result in results:
        item: dict[str, Any] = {"id": result.delivery_id, "verdict": result.verdict.value}
        if result.verdict is Verdict.RETRY and result.retry_after_s is not None:
            item["after"] = result.retry_after_s
        if result.reason:
            item["reason"] = result.reason
        items.append(item)
    return json.dumps({"results": items}, separators=(",", ":")).encode()


async def answer_batch(handler: Handler, deliveries: Sequence[Delivery]) -> list[Result]:
    """Run ``handler`` on every delivery of a batch at once; a result for each, in order."""
    return list(await asyncio.gather(*(handle(handler, d) for d in deliveries)))


def _field(event: Mapping[str, Any], name: str, kind: type, where: str, default: Any = None) -> Any:
    value = event.get(name, default)
    if value is None:
        raise BatchEnvelopeError(f"{where}: {name} is missing")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BatchEnvelopeError(f"{where}: {name} is not a {kind.__name__}")
    return value


def _decode(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise BatchEnvelopeError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BatchEnvelopeError(f"{what} is not valid base64") from None


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
        raise BatchEnvelopeError(f"{where} is not {{key, value_base64}}")
    return header["key"], _decode(header.get("value_base64"), f"{where}.value_base64")


def _timestamp_ms(value: object, where: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, str):
        raise BatchEnvelopeError(f"{where}: time is not a string")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise BatchEnvelopeError(f"{where}: time is not RFC 3339") from None
    return round(when.timestamp() * 1000)
