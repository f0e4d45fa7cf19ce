"""OpenTelemetry tracing of deliveries (docs/operations.md, "Tracing").

``settings`` and ``context`` are pure and import nothing of OpenTelemetry; ``otel``, ``calls``
and ``writes`` do, and are imported only where tracing is on.
"""
