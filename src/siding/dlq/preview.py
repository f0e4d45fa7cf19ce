"""Pure: a safe, short rendering of a key or payload that may be text or binary."""

from __future__ import annotations

# Text with control characters (other than tab/newline/return) is shown as binary.
_ALLOWED_CONTROL = frozenset("\t\n\r")
HEX_BYTES = 16


def _as_text(data: bytes, truncated: bool) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        # A prefix cut by the read may end inside a multi-byte character.
        if truncated and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data[: exc.start].decode()
        return None


def is_text(text: str) -> bool:
    return all(ch.isprintable() or ch in _ALLOWED_CONTROL for ch in text)


def preview(data: bytes | None, total: int | None = None, width: int = 60) -> str:
    """``data`` (the first bytes of a ``total``-byte value) as one line: text truncated to
    ``width`` characters with ``…``, or ``<binary N bytes: hex…>``; ``<null>`` for no value."""
    if data is None:
        return "<null>"
    size = len(data) if total is None else total
    truncated = size > len(data)
    text = _as_text(data, truncated)
    if text is None or not is_text(text):
        shown = data[:HEX_BYTES].hex()
        more = "…" if size > HEX_BYTES else ""
        return f"<binary {size} bytes: {shown}{more}>"
    one_line = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    if len(one_line) > width or truncated:
        return one_line[: max(1, width - 1)] + "…"
    return one_line
