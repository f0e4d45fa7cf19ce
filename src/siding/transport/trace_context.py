"""The trace context of the call being made now, for transports whose calls carry it beside the
delivery (gRPC metadata); set by siding.tracing's attempt span, empty when tracing is off."""

from __future__ import annotations

from contextvars import ContextVar

from siding.transport.grpc_common import Metadata

CALL_TRACE: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("siding_call_trace", default=())


def with_trace(metadata: Metadata) -> Metadata:
    """``metadata`` plus the current call's ``traceparent``/``tracestate`` (if any)."""
    trace = CALL_TRACE.get()
    return metadata + trace if trace else metadata
