"""The OpenTelemetry SDK, once per process: a tracer provider made lazily in the process that
uses it (Spark forks and reuses Python workers: a provider made before a fork would export
from a dead thread), its batch exporter over OTLP/gRPC, and a bounded flush."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
    Tracer,
    TraceState,
    set_span_in_context,
)

from siding.tracing.context import TraceParent
from siding.tracing.settings import TraceSettings

log = logging.getLogger(__name__)


class _Counted(SpanExporter):
    """The OTLP exporter, counting what it failed to export (it never raises into a delivery:
    spans are exported from the batch processor's own thread)."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self.failed = 0  # read and reset under otel._lock (take_export_failures)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # best effort: a span is never worth a delivery
            log.warning("tracing: export failed: %s", exc)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


@dataclass
class _Process:
    pid: int
    settings: TraceSettings
    provider: TracerProvider
    tracer: Tracer
    exporter: _Counted


_lock = threading.Lock()
_current: list[_Process] = []  # at most one, for this process id


def sampler(settings: TraceSettings) -> Sampler | None:
    """Parent-based with ``sample_ratio`` for new traces; ``None`` leaves the choice to
    ``OTEL_TRACES_SAMPLER`` (the SDK's default: parent-based, every new trace)."""
    if settings.sample_ratio is None:
        return None
    return ParentBased(TraceIdRatioBased(settings.sample_ratio))


def resource(settings: TraceSettings) -> Resource:
    # Resource.create also reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME.
    if settings.service_name is None:
        return Resource.create()
    return Resource.create({SERVICE_NAME: settings.service_name})


def _build(settings: TraceSettings) -> _Process:
    for name, value in settings.env:
        os.environ.setdefault(name, value)
    if settings.endpoint is not None:
        exporter = OTLPSpanExporter(
            endpoint=settings.endpoint, insecure=settings.endpoint.startswith("http://")
        )
    else:
        exporter = OTLPSpanExporter()
    counted = _Counted(exporter)
    provider = TracerProvider(sampler=sampler(settings), resource=resource(settings))
    provider.add_span_processor(BatchSpanProcessor(counted))
    tracer = provider.get_tracer("siding")
    return _Process(os.getpid(), settings, provider, tracer, counted)


def _process(settings: TraceSettings) -> _Process:
    with _lock:
        pid = os.getpid()
        if _current and _current[0].pid == pid and _current[0].settings == settings:
            return _current[0]
        if _current and _current[0].pid == pid:
            _current[0].provider.shutdown()  # the settings changed (a new config)
        _current[:] = [_build(settings)]
        return _current[0]


def tracer(settings: TraceSettings) -> Tracer:
    """This process's tracer for ``settings`` (made on first use in each process)."""
    return _process(settings).tracer


def flush(timeout_s: float) -> bool:
    """Export this process's ended spans, waiting at most ``timeout_s``; ``False`` if not all
    went (never raises)."""
    with _lock:
        current = _current[0] if _current and _current[0].pid == os.getpid() else None
    if current is None:
        return True
    try:
        return current.provider.force_flush(int(timeout_s * 1000))
    except Exception as exc:  # best effort
        log.warning("tracing: flush failed: %s", exc)
        return False


def take_export_failures() -> int:
    """Spans this process failed to export since the last call."""
    with _lock:
        current = _current[0] if _current and _current[0].pid == os.getpid() else None
        if current is None:
            return 0
        failed, current.exporter.failed = current.exporter.failed, 0
        return failed


def parent(incoming: TraceParent | None) -> Context:
    """The context a record's span is made in: its producer's span, else none (a new root)."""
    if incoming is None:
        return Context()
    remote = SpanContext(
        trace_id=incoming.trace_id,
        span_id=incoming.span_id,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if incoming.sampled else TraceFlags.DEFAULT),
        trace_state=TraceState.from_header([incoming.tracestate]) if incoming.tracestate else None,
    )
    return set_span_in_context(NonRecordingSpan(remote))


def traceparent_of(span: Span) -> tuple[str, str]:
    """(``traceparent``, ``tracestate``) that carry ``span`` on as the parent of a call."""
    ctx = span.get_span_context()
    flags = "01" if ctx.trace_flags.sampled else "00"
    header = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags}"
    return header, ctx.trace_state.to_header() if ctx.trace_state else ""
