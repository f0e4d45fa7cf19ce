"""``[tracing]``: OpenTelemetry spans for each delivery attempt, lane write, park and dead letter,
exported over OTLP/gRPC (docs/operations.md, "Tracing"). Off unless ``enabled = true``.

A key set here wins over the OpenTelemetry SDK's own ``OTEL_*`` variable for the same thing; a
key left out leaves that variable (or the SDK's default) in force.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from siding.config.fields import Number


class TracingConfig(BaseModel):
    """``endpoint``: the OTLP/gRPC receiver (``http://host:4317`` plain, ``https://`` with TLS;
    else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``, else
    ``http://localhost:4317``). ``sample_ratio``: the share of new traces recorded, parent-based
    (a record whose producer sampled its trace is recorded; one it did not is not); else
    ``OTEL_TRACES_SAMPLER``, else every trace. ``service_name``: the spans' ``service.name``
    (else ``OTEL_SERVICE_NAME``, else ``siding``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    enabled: StrictBool = False
    endpoint: str | None = None
    sample_ratio: Number | None = Field(default=None, ge=0.0, le=1.0)
    service_name: str | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        text = value.strip()
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{text!r}: expected http://host:port (plain OTLP/gRPC) or https://host:port (TLS)"
            )
        if parts.path.strip("/") or parts.query:
            raise ValueError(f"{text!r}: an OTLP/gRPC endpoint has no path")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None
        return text

    @field_validator("service_name")
    @classmethod
    def _service_name(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value.strip() if value is not None else None
