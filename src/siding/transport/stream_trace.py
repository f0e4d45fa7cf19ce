"""The switch of the suspects' trace (``siding.dispatch.trace``), and its one transport line: what
a broken gRPC stream still had pending, and which of those had reached the wire (``written``:
the consumer may have had them when it went away, so they become suspects)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

TRACE_ENV = "SIDING_TRACE_SUSPECTS"
MAX_IDS = 40


def enabled() -> bool:
    return os.environ.get(TRACE_ENV, "") not in ("", "0")


def ended_line(cause: str, entries: Sequence[tuple[str, bool]], *, ours: bool, pid: int) -> str:
    """Pure: one line for a stream that ended, from its pending (id, written) entries."""
    written = [i for i, w in entries if w]
    unwritten = [i for i, w in entries if not w]
    return (
        f"siding-stream ended pid={pid} ours={ours} written={len(written)}"
        f" unwritten={len(unwritten)} cause={cause[:160]!r}"
        f" written_ids={','.join(written[:MAX_IDS])} unwritten_ids={','.join(unwritten[:MAX_IDS])}"
    )


def trace_ended(cause: str, entries: Sequence[tuple[str, bool]], *, ours: bool) -> None:
    if enabled():
        line = ended_line(cause, entries, ours=ours, pid=os.getpid())
        sys.stderr.write(f"{line} at={time.time():.3f}\n")  # one write: lines never mix
        sys.stderr.flush()
