"""The suspects' trace: one line per event in a suspect's life (docs/dispatch.md, "Suspects"),
to follow a crash pill's deaths across tasks, lanes and Python workers.

Off by default (DEBUG log lines, which a Spark worker does not show). With
``SIDING_TRACE_SUSPECTS=1`` in siding's environment each line goes to the worker's stderr, which
Spark keeps with the executor's output (in local mode: siding's own stderr).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping

from siding.transport.stream_trace import TRACE_ENV, enabled

log = logging.getLogger(__name__)

__all__ = ["TRACE_ENV", "SuspectTrace", "enabled", "line"]


def line(where: str, event: str, record: str, fields: Mapping[str, object]) -> str:
    """Pure: one trace line, ``key=value`` pairs in the given order."""
    rest = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"siding-suspect {event} {record} {where} {rest}".rstrip()


class SuspectTrace:
    """Where the lines come from (lane, batch, task, process), said on each of them."""

    def __init__(self, where: str) -> None:
        self.where = f"{where} pid={os.getpid()}".strip()
        self._loud = enabled()

    def __call__(self, event: str, record: str, **fields: object) -> None:
        if not self._loud and not log.isEnabledFor(logging.DEBUG):
            return
        text = line(self.where, event, record, {"at": f"{time.time():.3f}", **fields})
        if self._loud:
            sys.stderr.write(f"{text}\n")  # one write: lines of several workers never mix
            sys.stderr.flush()
        else:
            log.debug("%s", text)
