"""Pure: a batch answered as a stream of results, one JSON object per line, each written as its
delivery finishes (docs/batch.md, "Results as they finish"), cut into lines and read."""

from __future__ import annotations

import json

from siding.model import Outcome
from siding.transport.batch_envelope import item_outcome

# What siding asks for on a batch: a stream of results, else the one JSON answer.
RESULT_STREAM_TYPE = "application/x-ndjson"
BATCH_ACCEPT = f"{RESULT_STREAM_TYPE}, application/json"


def is_result_stream(content_type: str | None) -> bool:
    """Whether an answer's content type is the stream of results."""
    return (content_type or "").split(";")[0].strip().lower() == RESULT_STREAM_TYPE


class LineTooLong(ValueError):
    """A line of the stream is longer than siding reads."""


class ResultLines:
    """Cuts the chunks of a stream into its lines (without their ``\\n``); a line longer than
    ``limit`` bytes is refused (``LineTooLong``) rather than held in memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._rest = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines that ``chunk`` completes, in order."""
        self._rest += chunk
        *lines, rest = bytes(self._rest).split(b"\n")
        self._rest = bytearray(rest)
        if len(self._rest) > self._limit or any(len(line) > self._limit for line in lines):
            raise LineTooLong(f"a line of the batch's results is over {self._limit} bytes")
        return lines

    def rest(self) -> bytes:
        """What came after the last ``\\n`` (a last line without one still counts)."""
        return bytes(self._rest)


def line_result(line: bytes) -> tuple[str, Outcome] | None:
    """The delivery id and outcome one line gives, or ``None`` for a line that names no
    delivery (blank, not JSON, not an object with a string ``id``): it is passed over, and a
    delivery no line answers is a RETRY, never an ack."""
    text = line.strip()
    if not text:
        return None
    try:
        item = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return None
    return item["id"], item_outcome(item)
