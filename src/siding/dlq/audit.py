"""The audit trail: one JSON event per merge or purge, appended to the route's audit topic."""

from __future__ import annotations

from collections.abc import Mapping

from siding.dlq.filters import iso
from siding.routing.audit import audit_record, who

__all__ = ["audit_event", "audit_record", "who"]


def audit_event(
    *,
    at_ms: int,
    by: str,
    command: str,
    route: str,
    dlq_topic: str,
    filter_: Mapping[str, object],
    count: int,
    status: str = "ok",
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    return {
        "at": iso(at_ms),
        "at_ms": at_ms,
        "who": by,
        "command": command,
        "route": route,
        "dlq": dlq_topic,
        "filter": dict(filter_),
        "count": count,
        "status": status,
        **dict(extra or {}),
    }
