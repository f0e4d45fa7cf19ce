"""The attempt span: one per call a transport makes, parented to the record's incoming trace
context, and carried on in the call (its headers, and gRPC metadata)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, Tracer

from siding.model import Delivery, Outcome, OutcomeKind
from siding.tracing import otel
from siding.tracing.context import (
    TRACEPARENT,
    TRACESTATE,
    attempt_attributes,
    attempt_span_name,
    carrying,
    incoming,
    outcome_name,
)
from siding.transport.base import Transport
from siding.transport.trace_context import CALL_TRACE


class TracedTransport:
    """``inner`` with a span around each ``send``. ``attempts`` keeps each delivery's last
    attempt span (by delivery id), for the spans of the records the task then writes."""

    def __init__(self, inner: Transport, tracer: Tracer, route: str, group: str) -> None:
        self._inner = inner
        self._tracer = tracer
        self._route = route
        self._group = group
        self.attempts: dict[str, SpanContext] = {}

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        span = self._tracer.start_span(
            attempt_span_name(delivery),
            context=otel.parent(incoming(delivery.headers)),
            kind=SpanKind.CLIENT,
            attributes=attempt_attributes(delivery, self._route, self._group),
        )
        # Known from the start: a parked call's write span links to it before it answers.
        self.attempts[delivery.id] = span.get_span_context()
        traceparent, tracestate = otel.traceparent_of(span)
        call = ((TRACEPARENT, traceparent),) + (((TRACESTATE, tracestate),) if tracestate else ())
        token = CALL_TRACE.set(call)
        try:
            sent = replace(delivery, headers=carrying(delivery.headers, traceparent, tracestate))
            outcome = await self._inner.send(sent, deadline_s)
        except asyncio.CancelledError:
            span.set_attribute("siding.outcome", "cancelled")
            span.end()
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.end()
            raise
        finally:
            CALL_TRACE.reset(token)
        span.set_attribute("siding.outcome", outcome_name(outcome))
        if outcome.kind in (OutcomeKind.DEAD, OutcomeKind.GONE):
            span.set_status(Status(StatusCode.ERROR, outcome.reason[:200]))
        elif outcome.reason:
            span.set_attribute("siding.reason", outcome.reason[:200])
        span.end()
        return outcome

    async def probe(self) -> bool:
        return await self._inner.probe()

    async def close(self) -> None:
        await self._inner.close()
