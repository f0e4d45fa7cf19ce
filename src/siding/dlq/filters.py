"""Pure: which dead letters a command is about (``--since/--until/--reason/--key``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from siding.config import parse_duration
from siding.errors import DlqError

HEX_PREFIX = "hex:"


@dataclass(frozen=True, slots=True)
class LetterFilter:
    """Letters that died in ``[since_ms, until_ms)``, whose reason matches ``reason`` (a Java
    regex, found anywhere) and whose key is exactly ``key``. ``None`` means "any"."""

    since_ms: int | None = None
    until_ms: int | None = None
    reason: str | None = None
    key: bytes | None = None

    def describe(self) -> dict[str, object]:
        """The filter as JSON-ready values, for the audit trail and ``--format json``."""
        return {
            "since": iso(self.since_ms) if self.since_ms is not None else None,
            "until": iso(self.until_ms) if self.until_ms is not None else None,
            "reason": self.reason,
            "key": key_spec(self.key) if self.key is not None else None,
        }


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def parse_when(text: str, now_ms: int) -> int:
    """Epoch ms of ``--since/--until``: an ISO-8601 time (UTC unless it says otherwise) or an age
    such as ``2h``, ``30m``, ``1d`` or ``1h30m`` (that long before now)."""
    value = text.strip()
    try:
        return now_ms - round(parse_duration(value) * 1000)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise DlqError(
            f"{text!r} is not a time: give an ISO time (2026-01-31T12:00:00Z) or an age (2h, 30m)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)


def parse_key(text: str) -> bytes:
    """``--key``: the key as UTF-8 text, or ``hex:<digits>`` for a binary key."""
    if not text.startswith(HEX_PREFIX):
        return text.encode()
    try:
        return bytes.fromhex(text.removeprefix(HEX_PREFIX))
    except ValueError:
        raise DlqError(f"--key {text!r}: after 'hex:' give hex digits, e.g. hex:00ff") from None


def key_spec(key: bytes) -> str:
    """The inverse of ``parse_key``: text when the key is clean UTF-8, else ``hex:...``."""
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return HEX_PREFIX + key.hex()
    return HEX_PREFIX + key.hex() if text.startswith(HEX_PREFIX) else text


def check_reason(pattern: str) -> str:
    """Refuse a pattern that is not a regex (Spark would fail later with a JVM stack trace)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise DlqError(f"--reason {pattern!r} is not a regular expression: {exc}") from None
    return pattern


def build_filter(
    *,
    since: str | None,
    until: str | None,
    reason: str | None,
    key: str | None,
    now_ms: int,
) -> LetterFilter:
    made = LetterFilter(
        since_ms=parse_when(since, now_ms) if since else None,
        until_ms=parse_when(until, now_ms) if until else None,
        reason=check_reason(reason) if reason else None,
        key=parse_key(key) if key is not None else None,
    )
    if made.since_ms is not None and made.until_ms is not None and made.since_ms >= made.until_ms:
        raise DlqError("--since must be before --until")
    return made
