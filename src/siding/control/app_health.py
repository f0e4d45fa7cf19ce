"""Health of a running ``Application``: one ``QueryHealth`` per streaming query."""

from __future__ import annotations

from siding.control.status import QueryHealth
from siding.pipeline.driver.app import Application


def application_health(app: Application) -> list[QueryHealth]:
    """Ask each query whether it is active; a stopped query reports its exception's first line."""
    out: list[QueryHealth] = []
    for query in list(app.queries):
        try:
            active = bool(query.isActive)
            error = None if active else _first_line(query.exception())
        except Exception as exc:  # the JVM is going away: report, do not raise
            active, error = False, _first_line(exc)
        out.append(QueryHealth(str(query.name), active, error))
    return out


def _first_line(error: object) -> str | None:
    if error is None:
        return None
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__
