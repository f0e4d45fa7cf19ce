"""Pure: a page as a signed CloudEvent (structured mode, JSON), ready to POST (docs/dlq.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from siding.routing.page_book import LetterNote, Page
from siding.transport import signing

EVENT_TYPE = "dev.siding.dlq.page"
CONTENT_TYPE = "application/cloudevents+json"


@dataclass(frozen=True, slots=True)
class PageRequest:
    """The body and headers of one page's POST; ``id`` is its ``webhook-id`` and CloudEvent id."""

    id: str
    body: bytes
    headers: dict[str, str]


def page_id(route: str, page: Page, now_ms: int) -> str:
    """Stable for the page's first letter where the DLQ said where it lies, else by time."""
    first = page.letters[0] if page.letters else None
    if first is not None and first.dlq_offset is not None:
        return f"dlq-page:{route}:{first.dlq_topic}/{first.dlq_partition}/{first.dlq_offset}"
    return f"dlq-page:{route}:{now_ms}:{page.count}"


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def letter_json(note: LetterNote) -> dict[str, object]:
    return {
        "id": note.id,
        "topic": note.topic,
        "partition": note.partition,
        "offset": note.offset,
        "reason": note.reason,
        "class": note.dead_class,
        "attempt": note.attempt,
        "lane": note.lane,
        "died_at": _rfc3339(note.died_at_ms) if note.died_at_ms is not None else None,
        "dlq": {
            "topic": note.dlq_topic,
            "partition": note.dlq_partition,
            "offset": note.dlq_offset,
        },
    }


def page_event(route: str, dlq_topic: str, page: Page, now_ms: int) -> dict[str, object]:
    """The CloudEvent (specversion 1.0) announcing ``page``."""
    return {
        "specversion": "1.0",
        "id": page_id(route, page, now_ms),
        "source": f"/siding/routes/{route}",
        "type": EVENT_TYPE,
        "subject": dlq_topic,
        "time": _rfc3339(now_ms),
        "datacontenttype": "application/json",
        "data": {
            "route": route,
            "dlq": dlq_topic,
            "count": page.count,
            "listed": len(page.letters),
            "letters": [letter_json(n) for n in page.letters],
        },
    }


def page_request(
    route: str, dlq_topic: str, page: Page, *, secret: str, now_ms: int
) -> PageRequest:
    """The signed POST for ``page`` (Standard Webhooks, as siding signs deliveries)."""
    event = page_event(route, dlq_topic, page, now_ms)
    body = json.dumps(event, separators=(",", ":")).encode()
    event_id = str(event["id"])
    timestamp_s = now_ms // 1000
    headers = {
        "content-type": CONTENT_TYPE,
        signing.ID_HEADER: event_id,
        signing.TIMESTAMP_HEADER: str(timestamp_s),
        signing.SIGNATURE_HEADER: signing.sign(secret, event_id, timestamp_s, body),
    }
    return PageRequest(event_id, body, headers)
