"""Why a route stopped: the one line ``siding run`` ends with (docs/operations.md, "When a route
stops").

Whatever decides that a route cannot go on raises ``RouteStopped`` (``siding.errors``) with the
reason as its message. The batch handler's edge (``batch.guarded``) records the first reason here,
asks the application to stop, and ends its batch as a stop (nothing committed, no trace); the
application's ``run`` then raises the recorded reason, and the CLI prints it as its last line.
"""

from __future__ import annotations

import threading


def one_line(text: str, limit: int = 500) -> str:
    """Pure: the first non-blank line of ``text``, at most ``limit`` characters."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


class RouteStops:
    """The first reason any route had to stop; recording it sets ``stop`` (the application's
    stop event: every query then stops, and nothing uncommitted is lost)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None

    def record(self, reason: str) -> bool:
        """Keep ``reason`` unless one was kept already; ``True`` when it was kept."""
        with self._lock:
            kept = self._reason is None
            if kept:
                self._reason = one_line(reason) or "stopped"
        self.stop.set()
        return kept

    @property
    def reason(self) -> str | None:
        with self._lock:
            return self._reason
