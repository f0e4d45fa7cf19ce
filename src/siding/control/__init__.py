"""The driver's HTTP API: health, status and Prometheus metrics (see docs/operations.md)."""

from siding.control.app_health import application_health
from siding.control.plane import ControlPlane
from siding.control.prometheus import metrics_registry, render
from siding.control.server import ControlServer
from siding.control.status import QueryHealth, health_document, ready_document, status_document

__all__ = [
    "ControlPlane",
    "ControlServer",
    "QueryHealth",
    "application_health",
    "health_document",
    "metrics_registry",
    "ready_document",
    "render",
    "status_document",
]
