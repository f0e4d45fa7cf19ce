"""The test collector itself (tests/otelcol, built by ``make setup``): a span exported over
OTLP/gRPC by the OpenTelemetry SDK comes back from ``OtelCollector.spans`` with its ids, name,
kind, attributes and service, through the collector's OTLP/HTTP JSON export to the test's
server."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from siding.devkit.otel_collector import OtelCollector
from siding.devkit.wait import wait_until


def test_a_span_sent_to_the_collector_comes_back_from_its_export() -> None:
    with OtelCollector() as collector:
        exporter = OTLPSpanExporter(endpoint=collector.endpoint, insecure=True)
        provider = TracerProvider(resource=Resource.create({"service.name": "probe"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("deliver orders", kind=SpanKind.CLIENT) as span:
            span.set_attribute("messaging.kafka.offset", 7)
            span.set_attribute("siding.outcome", "ack")
        provider.shutdown()
        context = span.get_span_context()
        spans = wait_until(
            lambda: collector.spans() or None, timeout_s=30, what="the span in the sink"
        )
    assert spans is not None
    (got,) = spans
    assert got["traceId"] == f"{context.trace_id:032x}"
    assert got["spanId"] == f"{context.span_id:016x}"
    assert got["name"] == "deliver orders"
    assert got["kind"] == 3  # CLIENT
    assert got["service"] == "probe"
    assert got["attrs"] == {"messaging.kafka.offset": 7, "siding.outcome": "ack"}
