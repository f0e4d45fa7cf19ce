"""Tracing's pure parts and its attempt span, exported to the SDK's in-memory exporter."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind
from opentelemetry.trace.span import format_trace_id

from siding.config import parse_config
from siding.config.tracing import TracingConfig
from siding.errors import ConfigError
from siding.model import Delivery, Outcome, OutcomeKind, delivery_id
from siding.tracing import otel
from siding.tracing.calls import TracedTransport
from siding.tracing.context import (
    attempt_attributes,
    carrying,
    incoming,
    outcome_name,
    parse_traceparent,
)
from siding.tracing.settings import TraceSettings, service_name, trace_settings
from siding.transport.fake import ScriptedTransport
from siding.transport.trace_context import CALL_TRACE, with_trace

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
PARENT = f"00-{TRACE}-{SPAN}-01"


def delivery(headers: tuple[tuple[str, bytes], ...] = (), attempt: int = 1) -> Delivery:
    return Delivery(
        delivery_id("orders", 2, 7), "orders", 2, 7, b"k", b"v", headers, attempt=attempt
    )


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        (PARENT, True),
        (f"00-{TRACE}-{SPAN}-00", True),
        (f"01-{TRACE}-{SPAN}-01-future", True),  # a later version may add fields
        (f"00-{TRACE}-{SPAN}-01-extra", False),  # version 00 may not
        (f"ff-{TRACE}-{SPAN}-01", False),
        (f"00-{'0' * 32}-{SPAN}-01", False),
        (f"00-{TRACE}-{'0' * 16}-01", False),
        (f"00-{TRACE.upper()}-{SPAN}-01", False),
        ("garbage", False),
        ("", False),
    ],
)
def test_traceparent_is_read_as_w3c_trace_context(text: str, valid: bool) -> None:
    assert (parse_traceparent(text) is not None) is valid


def test_the_incoming_context_is_the_last_traceparent_header_with_its_tracestate() -> None:
    other = f"00-{'1' * 32}-{'2' * 16}-00"
    found = incoming(
        (("traceparent", other.encode()), ("TraceParent", PARENT.encode()), ("tracestate", b"a=1"))
    )
    assert found is not None
    assert (f"{found.trace_id:032x}", f"{found.span_id:016x}") == (TRACE, SPAN)
    assert found.sampled and found.tracestate == "a=1" and found.header == PARENT
    assert incoming((("traceparent", b"nope"),)) is None
    assert incoming((("other", b"x"),)) is None
    assert incoming((("traceparent", b"\xff\xfe"),)) is None


def test_the_call_carries_siding_context_in_place_of_the_producers() -> None:
    headers = (("a", b"1"), ("traceparent", PARENT.encode()), ("tracestate", b"x=y"))
    out = carrying(headers, "00-new-01", "")
    assert out == (("a", b"1"), ("traceparent", b"00-new-01"))
    assert carrying((), "tp", "s=1") == (("traceparent", b"tp"), ("tracestate", b"s=1"))


def test_attempt_attributes_follow_the_messaging_conventions() -> None:
    first = attempt_attributes(delivery(), "billing", "billing-group")
    assert first["messaging.system"] == "kafka"
    assert first["messaging.destination.name"] == "orders"
    assert first["messaging.destination.partition.id"] == "2"
    assert first["messaging.kafka.offset"] == 7
    assert first["messaging.consumer.group.name"] == "billing-group"
    assert first["siding.attempt"] == 1 and "siding.previous_attempt" not in first
    again = attempt_attributes(delivery(attempt=3), "billing", "g")
    assert again["siding.previous_attempt"] == 2


@pytest.mark.parametrize(
    ("outcome", "name"),
    [
        (Outcome(OutcomeKind.ACK), "ack"),
        (Outcome(OutcomeKind.RETRY, "grpc UNAVAILABLE"), "retry"),
        (Outcome(OutcomeKind.RETRY, "deadline", no_answer=True), "timeout"),
        (Outcome(OutcomeKind.DEAD, "bad"), "dead"),
        (Outcome(OutcomeKind.BACKOFF), "backoff"),
        (Outcome(OutcomeKind.RETRY, lost=True), "lost"),
    ],
)
def test_outcome_names(outcome: Outcome, name: str) -> None:
    assert outcome_name(outcome) == name


def test_tracing_is_off_by_default_and_when_the_sdk_is_disabled() -> None:
    assert trace_settings(TracingConfig(), {}) is None
    on = TracingConfig(enabled=True)
    assert trace_settings(on, {"OTEL_SDK_DISABLED": "true"}) is None
    got = trace_settings(on, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "HOME": "/"})
    assert got is not None
    assert got.env == (("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),)


def test_the_service_name_comes_from_the_table_then_otel_variables_then_siding() -> None:
    assert service_name("mine", {"OTEL_SERVICE_NAME": "env"}) == "mine"
    assert service_name(None, {"OTEL_SERVICE_NAME": "env"}) is None  # the SDK reads it
    assert service_name(None, {"OTEL_RESOURCE_ATTRIBUTES": "a=b, service.name=x"}) is None
    assert service_name(None, {}) == "siding"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('enabled = "yes"', "tracing.enabled"),
        ('endpoint = "grpc://collector:4317"', "tracing.endpoint"),
        ('endpoint = "http://collector:4317/v1/traces"', "tracing.endpoint"),
        ("sample_ratio = 1.5", "tracing.sample_ratio"),
        ("sample_ratio = true", "tracing.sample_ratio"),
        ('service_name = " "', "tracing.service_name"),
        ("ratio = 0.5", "tracing.ratio"),
    ],
)
def test_a_bad_tracing_key_is_named(table: str, key: str) -> None:
    text = (
        '[kafka]\nbootstrap = "127.0.0.1:9092"\n'
        f"[tracing]\n{table}\n"
        '[[route]]\ntopic = "t"\ngroup = "g"\nendpoint = "grpc://127.0.0.1:1"\n'
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert str(caught.value).startswith(key)


def _settings(ratio: float | None) -> TraceSettings:
    return TraceSettings(endpoint="http://127.0.0.1:1", sample_ratio=ratio, service_name="s")


@pytest.mark.parametrize(
    ("ratio", "parent_flags", "sampled"),
    [
        (0.0, None, False),  # a new trace at ratio 0
        (1.0, None, True),
        (0.0, "01", True),  # the producer sampled it: parent-based
        (1.0, "00", False),  # the producer did not
    ],
)
def test_sampling_is_parent_based_with_the_ratio_for_new_traces(
    ratio: float, parent_flags: str | None, sampled: bool
) -> None:
    sampler = otel.sampler(_settings(ratio))
    assert sampler is not None
    found = parse_traceparent(f"00-{TRACE}-{SPAN}-{parent_flags}") if parent_flags else None
    context = otel.parent(found)
    trace_id = int(TRACE, 16) if found else int("f" * 32, 16)
    decision = sampler.should_sample(context, trace_id, "deliver orders")
    assert (decision.decision is Decision.RECORD_AND_SAMPLE) is sampled


def test_no_ratio_leaves_the_sampler_to_the_sdk() -> None:
    assert otel.sampler(_settings(None)) is None


def test_the_tracing_package_does_not_import_opentelemetry_until_used() -> None:
    import subprocess

    code = (
        "import sys, siding.pipeline.executor.task, siding.pipeline.driver.batch,"
        " siding.tracing.settings, siding.tracing.context;"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_an_attempt_span_is_a_child_of_the_record_and_the_parent_of_the_call() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    inner = ScriptedTransport({delivery_id("orders", 2, 7): Outcome(OutcomeKind.RETRY, "later")})
    seen_metadata: list[tuple[tuple[str, str], ...]] = []
    original_send = inner.send

    async def send(d: Delivery, deadline_s: float) -> Outcome:
        seen_metadata.append(with_trace(()))
        return await original_send(d, deadline_s)

    inner.send = send  # type: ignore[method-assign,assignment]
    traced = TracedTransport(inner, provider.get_tracer("t"), "billing", "g")
    outcome = await traced.send(delivery((("traceparent", PARENT.encode()),)), 5.0)

    assert outcome.kind is OutcomeKind.RETRY
    (span,) = memory.get_finished_spans()
    assert span.kind is SpanKind.CLIENT
    assert format_trace_id(span.context.trace_id) == TRACE
    assert span.parent is not None and f"{span.parent.span_id:016x}" == SPAN
    assert span.attributes is not None and span.attributes["siding.outcome"] == "retry"
    sent_parent = f"00-{TRACE}-{span.context.span_id:016x}-01"
    assert dict(inner.started[0].headers)["traceparent"] == sent_parent.encode()
    assert seen_metadata == [(("traceparent", sent_parent),)]
    assert CALL_TRACE.get() == ()  # only for the call
    assert traced.attempts[delivery().id] == span.context


async def test_a_record_without_traceparent_starts_a_new_trace() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    traced = TracedTransport(ScriptedTransport(), provider.get_tracer("t"), "r", "g")
    await traced.send(delivery(), 5.0)
    (span,) = memory.get_finished_spans()
    assert span.parent is None
    assert span.attributes is not None and span.attributes["siding.outcome"] == "ack"


class _Refusing(SpanExporter):
    """An exporter whose endpoint refuses every batch (what the OTLP exporter returns then)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        assert spans
        return SpanExportResult.FAILURE


def test_spans_that_could_not_be_exported_are_counted_once() -> None:
    counted = otel._Counted(_Refusing())
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(counted))
    for _ in range(3):
        provider.get_tracer("t").start_span("s").end()
    assert counted.failed == 3
