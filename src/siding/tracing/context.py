"""Pure parts of tracing: a record's incoming W3C trace context, the context a call carries on,
and the attributes of siding's spans (OpenTelemetry messaging semantic conventions)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from siding.model import Delivery, Headers, Outcome

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE_MAX = 512


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A valid ``traceparent``: its ids and whether the producer sampled its trace."""

    trace_id: int
    span_id: int
    sampled: bool
    tracestate: str = ""

    @property
    def header(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"


def parse_traceparent(text: str, tracestate: str = "") -> TraceParent | None:
    """``text`` as W3C Trace Context level 1 reads it, or ``None`` when it is not valid (then the
    record starts a new trace)."""
    match = _TRACEPARENT.fullmatch(text.strip())
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    state = tracestate.strip() if len(tracestate) <= _TRACESTATE_MAX else ""
    return TraceParent(trace_id, span_id, bool(int(flags_hex, 16) & 1), state)


def _last(headers: Headers, name: str) -> str | None:
    found: str | None = None
    for key, value in headers:
        if key.lower() == name:
            try:
                found = value.decode("ascii")
            except (UnicodeDecodeError, AttributeError):
                found = None
    return found


def incoming(headers: Headers) -> TraceParent | None:
    """The record's trace context: its last ``traceparent`` Kafka header (as Kafka's
    ``lastHeader``), with its ``tracestate``; ``None`` for none or an invalid one."""
    text = _last(headers, TRACEPARENT)
    return None if text is None else parse_traceparent(text, _last(headers, TRACESTATE) or "")


def carrying(headers: Headers, traceparent: str, tracestate: str) -> Headers:
    """``headers`` with siding's call context in place of the record's own (so the consumer's
    spans hang below siding's attempt span)."""
    kept = tuple((k, v) for k, v in headers if k.lower() not in (TRACEPARENT, TRACESTATE))
    added: Headers = ((TRACEPARENT, traceparent.encode()),)
    if tracestate:
        added += ((TRACESTATE, tracestate.encode()),)
    return kept + added


def outcome_name(outcome: Outcome) -> str:
    """``siding.outcome`` of an attempt: ack, retry, dead, backoff, gone (``timeout`` for a
    deadline that ran out, ``lost`` for a call whose answer never came)."""
    if outcome.lost:
        return "lost"
    if outcome.no_answer and outcome.kind.value == "retry":
        return "timeout"
    return outcome.kind.value


def attempt_span_name(delivery: Delivery) -> str:
    return f"deliver {delivery.topic}"


def attempt_attributes(delivery: Delivery, route: str, group: str) -> dict[str, str | int]:
    """The attempt span's attributes (messaging semantic conventions, then siding's own)."""
    attributes: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.operation.name": "deliver",
        "messaging.operation.type": "send",
        "messaging.destination.name": delivery.topic,
        "messaging.destination.partition.id": str(delivery.partition),
        "messaging.kafka.offset": delivery.offset,
        "messaging.consumer.group.name": group,
        "messaging.message.id": delivery.id,
        "siding.route": route,
        "siding.attempt": delivery.attempt,
        "siding.lane": delivery.lane,
    }
    if delivery.attempt > 1:
        # The earlier attempt is a span of the same trace with this id and attempt - 1.
        attributes["siding.previous_attempt"] = delivery.attempt - 1
    return attributes


def write_attributes(
    delivery: Delivery, route: str, group: str, step: str, topic: str
) -> dict[str, str | int]:
    """A lane write's, a park's or a dead letter's span attributes: where the record went."""
    return {
        "messaging.system": "kafka",
        "messaging.operation.name": step,
        "messaging.operation.type": "send",
        "messaging.destination.name": topic,
        "messaging.message.id": delivery.id,
        "messaging.consumer.group.name": group,
        "siding.route": route,
        "siding.attempt": delivery.attempt,
        "siding.lane": delivery.lane,
        "siding.step": step,
        "siding.source.topic": delivery.topic,
        "siding.source.partition": delivery.partition,
        "siding.source.offset": delivery.offset,
    }
