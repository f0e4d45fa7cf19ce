"""What a process needs to trace: ``[tracing]`` resolved on the driver, picklable for tasks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from siding.config.tracing import TracingConfig

DEFAULT_SERVICE_NAME = "siding"
# How long a task waits at its end for its spans to be exported (best effort).
FLUSH_S = 2.0


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """``[tracing]`` as the workers get it. ``env``: the driver's ``OTEL_*`` variables, set in
    a worker that has none of its own (executors elsewhere do not share the driver's
    environment). ``None`` fields are left to the SDK (its variable, else its default)."""

    endpoint: str | None
    sample_ratio: float | None
    service_name: str | None
    env: tuple[tuple[str, str], ...] = ()
    flush_s: float = FLUSH_S


def trace_settings(config: TracingConfig, environ: Mapping[str, str]) -> TraceSettings | None:
    """``None`` when tracing is off (the table's ``enabled``, or ``OTEL_SDK_DISABLED=true``)."""
    if not config.enabled or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    env = tuple(sorted((k, v) for k, v in environ.items() if k.startswith("OTEL_")))
    return TraceSettings(
        endpoint=config.endpoint,
        sample_ratio=config.sample_ratio,
        service_name=service_name(config.service_name, environ),
        env=env,
    )


def service_name(configured: str | None, environ: Mapping[str, str]) -> str | None:
    """The table's name; else ``None`` where ``OTEL_SERVICE_NAME`` or a ``service.name`` in
    ``OTEL_RESOURCE_ATTRIBUTES`` names the service (the SDK reads those); else ``siding``."""
    if configured:
        return configured
    if environ.get("OTEL_SERVICE_NAME", "").strip():
        return None
    attributes = environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if any(pair.split("=", 1)[0].strip() == "service.name" for pair in attributes.split(",")):
        return None
    return DEFAULT_SERVICE_NAME
