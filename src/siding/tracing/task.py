"""A task's tracing: its transport wrapped in attempt spans, a span for each lane, park or hold
record it writes, and its spans flushed when it ends (a reused worker may then sit idle, or
die, with nothing left unexported)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from opentelemetry.trace import Link, SpanContext, SpanKind

from siding.dispatch.work import Settled
from siding.model import Delivery
from siding.routing import story
from siding.routing.producer import OutRecord
from siding.steps import Held, Parked, Step, ToDlq, ToLane
from siding.tracing import otel
from siding.tracing.calls import TracedTransport
from siding.tracing.context import incoming, write_attributes
from siding.tracing.settings import TraceSettings
from siding.transport.base import Transport


def step_name(step: Step) -> str | None:
    """The span a record's step is written under: lane, park, hold, dead letter (none for a
    record that is done, or written back unsent)."""
    match step:
        case ToLane():
            return "lane write"
        case Parked():
            return "park"
        case Held():
            return "hold"
        case ToDlq():
            return "dead letter"
        case _:
            return None


class TaskTrace:
    """One task's spans (made only where ``[tracing]`` is on)."""

    def __init__(self, settings: TraceSettings, route: str, group: str) -> None:
        self._settings = settings
        self._tracer = otel.tracer(settings)
        self._route = route
        self._group = group
        self._traced: list[TracedTransport] = []

    def wrap(self, transport: Transport) -> Transport:
        traced = TracedTransport(transport, self._tracer, self._route, self._group)
        self._traced.append(traced)
        return traced

    def wrote(
        self,
        items: Iterable[Settled],
        topic_of: Callable[[Delivery, Step], str],
        start_ns: int,
        end_ns: int,
    ) -> None:
        """Spans for the records Kafka acknowledged between ``start_ns`` and ``end_ns``, each in
        its record's trace, linked to the attempt that sent it there."""
        for item in items:
            name = step_name(item.step)
            if name is None:
                continue
            delivery = item.work.delivery
            attempt = self._attempt(delivery.id)
            span = self._tracer.start_span(
                f"{name} {topic_of(delivery, item.step)}",
                context=otel.parent(incoming(delivery.headers)),
                kind=SpanKind.PRODUCER,
                attributes=write_attributes(
                    delivery, self._route, self._group, name, topic_of(delivery, item.step)
                ),
                links=[Link(attempt)] if attempt is not None else None,
                start_time=start_ns,
            )
            span.end(end_time=end_ns)

    def _attempt(self, delivery_id: str) -> SpanContext | None:
        for traced in self._traced:
            found = traced.attempts.get(delivery_id)
            if found is not None:
                return found
        return None

    def dropped(self) -> int:
        """Spans this worker could not export since a task last asked (for the metric)."""
        return otel.take_export_failures()


def letter_spans(
    settings: TraceSettings,
    group: str,
    letters: Sequence[OutRecord],
    start_ns: int,
    end_ns: int,
) -> None:
    """On the driver: a span per dead letter Kafka acknowledged, in its record's trace."""
    tracer = otel.tracer(settings)
    for letter in letters:
        told = story.decode(letter.headers)
        if told is None:
            continue
        origin = told.origin
        delivery = Delivery(
            id=origin.delivery_id,
            topic=origin.topic,
            partition=origin.partition,
            offset=origin.offset,
            key=None,
            value=None,
            attempt=told.attempt,
            lane=told.lane,
        )
        span = tracer.start_span(
            f"dead letter {letter.topic}",
            context=otel.parent(incoming(story.user_headers(letter.headers))),
            kind=SpanKind.PRODUCER,
            attributes=write_attributes(delivery, told.route, group, "dead letter", letter.topic),
            start_time=start_ns,
        )
        span.end(end_time=end_ns)
    # Not flushed here: the driver lives on, and its batch exporter sends them within seconds.
