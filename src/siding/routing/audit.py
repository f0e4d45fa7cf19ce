"""The route's audit trail: one JSON event per operator action (a DLQ merge or purge, an offsets
reset, a group position adopted at start), appended to the route's audit topic
(``siding.naming.audit_topic``, kept for good)."""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Mapping

from siding.routing.producer import OutRecord


def who() -> str:
    """``user@host`` of whoever runs the command."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no passwd entry (containers)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def audit_record(audit_topic: str, event: Mapping[str, object]) -> OutRecord:
    key = str(event.get("route", "")).encode()
    return OutRecord(audit_topic, key, json.dumps(event, separators=(",", ":")).encode(), ())
