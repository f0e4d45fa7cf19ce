"""The headers of one webhook request, as a pure function of its delivery (docs/webhooks.md
lists every header)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime

from siding.config.http_grammar import CONTROL, FRAMING_NAMES, HEADER_NAME, OWN_PREFIXES
from siding.model import Delivery
from siding.transport import signing

DEFAULT_SOURCE = "kafka://{topic}"
DEFAULT_EVENT_TYPE = "dev.siding.delivery"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
IDEMPOTENCY_KEY = "idempotency-key"
# A forwarded header this long risks a 431/400 from the consumer's server, which would
# dead-letter a good message; such a header is dropped instead.
MAX_FORWARDED_VALUE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class RequestHeaders:
    """The headers of one webhook request, and how many Kafka headers were not forwarded."""

    headers: tuple[tuple[str, str], ...]
    dropped: int


def build_headers(
    delivery: Delivery,
    *,
    timestamp_s: int,
    secret: str | None = None,
    bearer_token: str | None = None,
    source: str = DEFAULT_SOURCE,
    event_type: str = DEFAULT_EVENT_TYPE,
    static: tuple[tuple[str, str], ...] = (),
    idempotency_key: bool = False,
) -> RequestHeaders:
    """Every header of the request for ``delivery`` (sent at ``timestamp_s``); pure.

    ``source`` may contain ``{topic}``. ``static`` are the route's own headers (checked when the
    configuration was loaded); ``idempotency_key`` adds ``idempotency-key``: the delivery id.
    Kafka headers are forwarded unless unsafe, reserved or named like one of those; a Kafka
    ``content-type`` header becomes the request's content type.
    """
    headers: list[tuple[str, str]] = [
        ("ce-specversion", "1.0"),
        ("ce-id", delivery.id),
        ("ce-source", source.replace("{topic}", delivery.topic)),
        ("ce-type", event_type),
    ]
    if delivery.timestamp_ms > 0:
        headers.append(("ce-time", rfc3339(delivery.timestamp_ms)))
    subject = printable_key(delivery.key)
    if subject is not None:
        headers.append(("ce-subject", subject))
    headers += [
        ("webhook-id", delivery.id),
        ("webhook-timestamp", str(timestamp_s)),
    ]
    if secret is not None:
        body = delivery.value or b""
        headers.append(("webhook-signature", signing.sign(secret, delivery.id, timestamp_s, body)))
    headers += [
        ("siding-attempt", str(delivery.attempt)),
        ("siding-lane", str(delivery.lane)),
        ("siding-topic", delivery.topic),
        ("siding-partition", str(delivery.partition)),
        ("siding-offset", str(delivery.offset)),
    ]
    if delivery.key is not None and subject is None:
        headers.append(("siding-key", base64.b64encode(delivery.key).decode()))
    if idempotency_key:
        headers.append((IDEMPOTENCY_KEY, delivery.id))
    headers += static
    # The operator's headers and siding's key are not replaced by a producer's.
    taken = {name.lower() for name, _ in static}
    if idempotency_key:
        taken.add(IDEMPOTENCY_KEY)

    content_type = DEFAULT_CONTENT_TYPE
    dropped = 0
    for name, raw in delivery.headers:
        value = header_value(raw)
        if value is None or not HEADER_NAME.fullmatch(name):
            dropped += 1
            continue
        lowered = name.lower()
        if lowered == "content-type":
            content_type = value  # the last one wins, as Kafka's Headers.lastHeader does
        elif lowered in FRAMING_NAMES or lowered.startswith(OWN_PREFIXES) or lowered in taken:
            dropped += 1
        else:
            headers.append((name, value))
    headers.append(("content-type", content_type))
    if bearer_token is not None:
        headers.append(("authorization", bearer(bearer_token)))
    return RequestHeaders(tuple(headers), dropped)


def header_value(raw: bytes) -> str | None:
    """A Kafka header value as a safe HTTP field value, or ``None`` when it must not be sent."""
    if len(raw) > MAX_FORWARDED_VALUE_BYTES:
        return None
    try:
        value = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if CONTROL.search(value) else value


def printable_key(key: bytes | None) -> str | None:
    """The key as text when it is non-empty printable ASCII that survives HTTP intact."""
    if not key or not key.isascii():
        return None
    text = key.decode("ascii")
    # Leading/trailing blanks would be trimmed in transit, so such a key goes as base64.
    return text if text.isprintable() and text == text.strip() else None


def rfc3339(timestamp_ms: int) -> str:
    """A Kafka timestamp (ms since the epoch) as RFC 3339 UTC with milliseconds."""
    seconds, millis = divmod(timestamp_ms, 1000)
    when = datetime.fromtimestamp(seconds, tz=UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


def bearer(token: str) -> str:
    return f"Bearer {token}"
