"""How ``siding run`` logs: ``--log-level`` and ``--log-format text|json`` (docs/operations.md)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Chatty libraries that say nothing an operator needs at INFO.
QUIET = ("py4j", "asyncio", "grpc")


def json_line(record: logging.LogRecord) -> str:
    """Pure: one log record as one JSON object; siding's structured fields (``extra={"siding":
    {...}}``) are merged in, the exception (if any) is one string."""
    entry: dict[str, object] = {
        "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": record.getMessage(),
    }
    fields = getattr(record, "siding", None)
    if isinstance(fields, dict):
        entry.update({k: v for k, v in fields.items() if k not in entry})
    if record.exc_info:
        entry["exception"] = logging.Formatter().formatException(record.exc_info)
    return json.dumps(entry, default=str, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json_line(record)


def configure(level: str = "info", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Replace the root logger's handlers with one on ``stream`` (stderr) in ``fmt``."""
    if level not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level {level!r} / format {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


class _CurrentStderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when a record comes (a CLI runner may swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def to_stderr(logger: str, level: str = "info") -> None:
    """Show one logger's lines on stderr in a command that does not set up logging (the root
    logger is left alone); a second call adds nothing."""
    target = logging.getLogger(logger)
    target.setLevel(level.upper())
    if not any(isinstance(h, _CurrentStderr) for h in target.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
        target.addHandler(handler)
