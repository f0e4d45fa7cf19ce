"""The audit trail: one JSON event per merge or purge, appended to the route's audit topic."""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Mapping

from siding.dlq.filters import iso
from siding.routing.producer import OutRecord


def who() -> str:
    """``user@host`` of whoever runs the command."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no passwd entry (containers)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


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


def audit_record(audit_topic: str, event: Mapping[str, object]) -> OutRecord:
    key = str(event.get("route", "")).encode()
    return OutRecord(audit_topic, key, json.dumps(event, separators=(",", ":")).encode(), ())
