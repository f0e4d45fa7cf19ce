"""The HTTP batch envelope (CloudEvents batched mode) and its answer, as pure functions.

docs/batch.md is the contract: what each event holds, how the request is signed, and what each
kind of answer means for every delivery of the batch.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from siding.model import ACK, Delivery, Outcome, OutcomeKind, Result, Verdict
from siding.transport.http_headers import (
    DEFAULT_CONTENT_TYPE,
    DEFAULT_EVENT_TYPE,
    DEFAULT_SOURCE,
    header_value,
    printable_key,
    rfc3339,
)
from siding.transport.outcomes import outcome_from_http, outcome_from_result
from siding.transport.outputs import with_outputs

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
NO_RESULT = "no result for this delivery in the batch answer"
# Every answer to a batch of one means what it would for that delivery alone; a batch of
# several refused with a status that would dead-letter is sent again one delivery at a time.
SPLIT = Outcome(OutcomeKind.RETRY, "refused as a batch: each delivery goes again alone")
# 415 to a batch: the consumer does not take batches; each delivery goes again as a single webhook.
UNBATCHED = Outcome(OutcomeKind.RETRY, "refused as a batch (415): sent again as a single webhook")
# A consumer that reads this envelope says so on every answer (each SDK's webhook server does):
# an HTTP route without a ``batch`` key sends it batches from its first such answer on, and a
# batch is ACKed only by an answer that says it too (docs/batch.md, "The default").
READS_BATCHES = ("siding-batch", "v1")
# A 2xx to an offered batch without that header: an instance behind the same URL that may not
# read batches took it; each delivery goes again as a single webhook.
UNSAID = Outcome(
    OutcomeKind.RETRY, "a batch answered without 'siding-batch: v1': sent again as a single webhook"
)
# JSON text, the quotes and names of the fixed attributes, beyond the base64 of the payload.
_EVENT_BYTES = 400
_VERDICTS = {"ack": Verdict.ACK, "retry": Verdict.RETRY, "dead": Verdict.DEAD}


def batch_id(deliveries: Sequence[Delivery]) -> str:
    """The ``webhook-id`` of a batch: ``batch:<id of the first delivery>:<count>``."""
    return f"batch:{deliveries[0].id}:{len(deliveries)}"


def content_type(delivery: Delivery) -> str:
    """The record's own ``content-type`` header when usable (the last one), else octet-stream."""
    found = DEFAULT_CONTENT_TYPE
    for name, raw in delivery.headers:
        if name.lower() == "content-type" and (value := header_value(raw)) is not None:
            found = value
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def event(
    delivery: Delivery, *, source: str = DEFAULT_SOURCE, event_type: str = DEFAULT_EVENT_TYPE
) -> dict[str, Any]:
    """One delivery as a structured-mode CloudEvent of the batch."""
    out: dict[str, Any] = {
        "specversion": "1.0",
        "id": delivery.id,
        "source": source.replace("{topic}", delivery.topic),
        "type": event_type,
    }
    if delivery.timestamp_ms > 0:
        out["time"] = rfc3339(delivery.timestamp_ms)
    subject = printable_key(delivery.key)
    if subject is not None:
        out["subject"] = subject
    out["datacontenttype"] = content_type(delivery)
    if delivery.value is not None:
        out["data_base64"] = _b64(delivery.value)
    if delivery.key is not None:
        out["sidingkey"] = _b64(delivery.key)
    out["sidingattempt"] = delivery.attempt
    out["sidinglane"] = delivery.lane
    out["sidingtopic"] = delivery.topic
    out["sidingpartition"] = delivery.partition
    out["sidingoffset"] = delivery.offset
    out["sidingheaders"] = [{"key": k, "value_base64": _b64(v)} for k, v in delivery.headers]
    return out


def envelope(
    deliveries: Sequence[Delivery],
    *,
    source: str = DEFAULT_SOURCE,
    event_type: str = DEFAULT_EVENT_TYPE,
) -> bytes:
    """The request body for ``deliveries``: a JSON array of their events, in order."""
    events = [event(d, source=source, event_type=event_type) for d in deliveries]
    return json.dumps(events, separators=(",", ":")).encode()


def event_size(delivery: Delivery) -> int:
    """About what ``delivery`` adds to an envelope (never much less): base64 grows by 4/3."""
    raw = len(delivery.value or b"") + len(delivery.key or b"")
    headers = sum(len(k) * 2 + len(v) + 32 for k, v in delivery.headers)
    return _EVENT_BYTES + len(delivery.id) + len(delivery.topic) * 2 + raw * 4 // 3 + headers


def reads_batches(headers: Mapping[str, str] | None) -> bool:
    """Pure: whether an answer's headers say its consumer reads the batch envelope."""
    if headers is None:
        return False
    name, version = READS_BATCHES
    value = headers.get(name)
    return value is not None and version in (v.strip() for v in value.split(","))


def batch_outcomes(
    deliveries: Sequence[Delivery],
    status: int,
    headers: Mapping[str, str] | None,
    body: bytes,
    *,
    complete: bool = True,
    excerpt: str = "",
    now_s: float | None = None,
    offered: bool = False,
) -> list[Outcome]:
    """Pure: the outcome of each delivery of a batch from the answer to its POST.

    ``body`` is the answer's body as read, ``complete`` whether it was read to its end;
    ``excerpt`` is the printable start of the body, appended to a failure's reason. A status
    that would dead-letter a batch of several gives ``SPLIT`` for each: they go again alone;
    415 (the consumer does not take batches) gives ``UNBATCHED``: they go again as single webhooks.
    An ``offered`` batch (the route has no ``batch`` key) is taken as answered only by a 2xx
    that says ``siding-batch: v1``; any other 2xx gives ``UNSAID``: single webhooks again.
    """
    count = len(deliveries)
    if status == 415:
        return [UNBATCHED] * count
    if offered and 200 <= status < 300 and not reads_batches(headers):
        return [UNSAID] * count
    if not 200 <= status < 300:
        outcome = outcome_from_http(status, headers, now_s)
        if outcome.kind is OutcomeKind.DEAD and count > 1:
            return [SPLIT] * count
        if outcome.kind is OutcomeKind.DEAD and status == 413:
            size = len(deliveries[0].value or b"")
            outcome = replace(outcome, reason=f"{outcome.reason} ({size} bytes)")
        if excerpt:
            outcome = replace(outcome, reason=f"{outcome.reason}: {excerpt}")
        return [outcome] * count
    answer = read_answer(body, complete)
    if isinstance(answer, str):
        return [Outcome(OutcomeKind.RETRY, answer)] * count
    if answer is None:
        return [ACK] * count
    return [answer.get(d.id) or Outcome(OutcomeKind.RETRY, NO_RESULT) for d in deliveries]


def read_answer(body: bytes, complete: bool = True) -> dict[str, Outcome] | str | None:
    """A 2xx body: the outcomes it gives by delivery id; ``None`` when it acks the whole batch
    (empty, not JSON, or JSON without ``results``); a reason when it cannot be read but looks
    like an answer (it starts like JSON), so that nothing it says is taken for an ack."""
    text = body.strip()
    if not text:
        return None
    looks_like_json = text[:1] in (b"{", b"[")
    if not complete:
        return "the batch answer is too large to read" if looks_like_json else None
    try:
        parsed = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return f"the batch answer is not valid JSON: {_start(text)}" if looks_like_json else None
    if not isinstance(parsed, dict) or "results" not in parsed:
        return None
    results = parsed["results"]
    if not isinstance(results, list):
        return "the batch answer's results is not a list"
    outcomes: dict[str, Outcome] = {}
    for item in results:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            outcomes.setdefault(item["id"], item_outcome(item))
    return outcomes


def item_outcome(item: Mapping[str, Any]) -> Outcome:
    """One entry of ``results``; an unknown verdict is a RETRY (never an ack, never a death)."""
    named = item.get("verdict")
    verdict = _VERDICTS.get(named) if isinstance(named, str) else None
    if verdict is None:
        return Outcome(OutcomeKind.RETRY, f"{NO_RESULT} (unknown verdict {named!r})")
    reason = item.get("reason")
    text = reason if isinstance(reason, str) else ""
    outcome = outcome_from_result(
        Result(str(item["id"]), verdict, _seconds(item.get("after")), text)
    )
    return with_outputs(outcome, item, f"results[{item['id']!r}].outputs")


def _seconds(after: object) -> float | None:
    """``after`` when it is a usable number of seconds (else the lane's own delay applies)."""
    if isinstance(after, bool) or not isinstance(after, int | float):
        return None
    return float(after) if math.isfinite(after) and after >= 0 else None


def _start(text: bytes) -> str:
    return text[:80].decode("utf-8", errors="replace")
