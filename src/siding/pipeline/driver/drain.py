"""A draining stop, on the driver (docs/operations.md, "Stopping siding").

States, in order: **running**; **draining** (``requested``): no batch starts (a batch that
Spark starts is held at its start, before it reads anything), the batches running go on to
their end and commit, and the answers of the calls parked in the workers are awaited until each
route's drain deadline; **stopping**: the queries are stopped one by one, a held batch ends with
``DrainStopped``, which Spark takes for a stop (nothing of it was delivered, so nothing of it is
committed, and the next run starts it again). ``hard`` (a second signal) skips the wait.

Workers learn of the drain from a file per route (``TaskPlan.drain_file``) that appears when the
drain begins: the running dispatches then park their calls and hand what they have not sent to
the park lane, so the running batches commit at once.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from siding.errors import SidingError
from siding.pipeline.executor.result import TaskResult

# Spark takes an error from a foreachBatch function for a stop when the query is being stopped
# and the text names a py4j call interrupted by it (SPARK-39218). The text stays short: Spark
# matches it with a regular expression that overflows the stack on long messages.
STOPPED_TEXT = (
    "held for a drain, then stopped (py4j.protocol.Py4JJavaError: An error occurred while"
    " calling Thread.sleep: java.lang.InterruptedException)"
)
HOLD_POLL_MS = 200
# A held batch whose query is being stopped, but whose sleep was not interrupted (the stop's
# interrupt was taken by a job it cancelled), ends itself after this long.
STOP_GRACE_S = 0.5

Sleep = Callable[[int], None]


class DrainStopped(SidingError):
    """A batch held for a drain (or caught by a stop) ended without delivering: not committed."""


class _QuietDrainStops(logging.Filter):
    """py4j logs every error of a Python callback with its traceback; a drain's is expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, DrainStopped)


def quiet_py4j() -> None:
    """Keep py4j from printing a traceback for each batch a drain ended (idempotent)."""
    for name in ("py4j.clientserver", "py4j.java_gateway"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietDrainStops) for f in logger.filters):
            logger.addFilter(_QuietDrainStops())


def hold(sleep: Sleep, stopping: Callable[[], bool]) -> NoReturn:
    """Hold a batch's thread in the JVM (``sleep`` runs on the query's own thread, so that the
    query's stop interrupts it) until the query is stopped; then raise ``DrainStopped``."""
    stopping_since: float | None = None
    while True:
        try:
            sleep(HOLD_POLL_MS)
        except Exception:  # interrupted by the stop (or the JVM went away)
            raise DrainStopped(STOPPED_TEXT) from None
        if stopping():
            stopping_since = stopping_since or time.monotonic()
            if time.monotonic() - stopping_since >= STOP_GRACE_S:
                # No context: a chained py4j error would put its long Java trace in the text.
                raise DrainStopped(STOPPED_TEXT) from None


@dataclass
class RouteTally:
    """What a route's drain did: calls answered, calls and records handed to the park lane."""

    finished: int = 0
    handed: int = 0
    seconds: float | None = None
    # (token, not-before ms) of calls parked still running whose answer is not yet known.
    parked: dict[str, int] = field(default_factory=dict)


def summary(route: str, tally: RouteTally, *, replayed: int = 0, hard: bool = False) -> str:
    """Pure: the log line of one route's drain."""
    calls = "call" if tally.finished == 1 else "calls"
    text = (
        f"drain: route {route}: {tally.finished} {calls} finished,"
        f" {tally.handed + len(tally.parked)} handed to a lane,"
        f" in {tally.seconds or 0.0:.1f}s"
    )
    if hard:
        text += " (stopped at once)"
    if replayed:
        text += f"; {replayed} batch(es) stopped mid-way are delivered again on the next start"
    return text


def fields(
    route: str, tally: RouteTally, *, replayed: int = 0, hard: bool = False
) -> dict[str, Any]:
    """Pure: the same as structured log fields (``--log-format json``)."""
    return {
        "event": "drain",
        "route": route,
        "finished": tally.finished,
        "handed": tally.handed + len(tally.parked),
        "seconds": round(tally.seconds or 0.0, 3),
        "replayed": replayed,
        "hard": hard,
    }


def answered(results: Iterable[TaskResult]) -> int:
    """Calls of a batch that have an answer (acked, to a lane, dead)."""
    return sum(r.counts.acked + r.counts.to_lane + r.counts.to_dlq for r in results)


def handed_unsent(results: Iterable[TaskResult]) -> int:
    """Records of a batch handed to the park lane without a call running for them."""
    return sum(r.counts.parked - len(r.running_parked) for r in results)


class Drain:
    """The driver's drain state, shared by the batch handlers, the listener and the app."""

    def __init__(
        self, routes: Mapping[str, float] | None = None, hard: threading.Event | None = None
    ) -> None:
        # route name -> drain timeout (seconds)
        self._timeouts = dict(routes or {})
        self._lock = threading.Lock()
        self.requested = threading.Event()
        self.hard = hard or threading.Event()
        self.began = 0.0
        self._busy: Counter[str] = Counter()
        self._completed: dict[str, int] = {}
        self._progressed: dict[str, int] = {}
        self._stopping: set[str] = set()
        self._tallies = {name: RouteTally() for name in self._timeouts}
        self._dir: Path | None = None

    def track(self, route: str, timeout_s: float, queries: Iterable[str]) -> None:
        """A route made at runtime drains like the others (docs/registration.md)."""
        with self._lock:
            self._timeouts[route] = timeout_s
            self._tallies.setdefault(route, RouteTally())
            self._stopping.difference_update(queries)  # made again after it was deleted

    def untrack(self, route: str, queries: Iterable[str]) -> None:
        """A deleted route: its queries are stopped; nothing of it is waited for any more."""
        with self._lock:
            self._timeouts.pop(route, None)
            self._tallies.pop(route, None)
            for query in queries:
                self._busy.pop(query, None)
                self._completed.pop(query, None)
                self._progressed.pop(query, None)

    # --- workers ---------------------------------------------------------------------------

    def open_signal(self) -> None:
        """A fresh folder for the drain files (one per run of the application)."""
        self._dir = Path(tempfile.mkdtemp(prefix="siding-drain-"))

    def signal_file(self, route: str) -> str:
        return str(self._dir / route) if self._dir is not None else ""

    def close_signal(self) -> None:
        folder, self._dir = self._dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    # --- batches ---------------------------------------------------------------------------

    def enter(self, query: str, sleep: Sleep) -> None:
        """At a batch's start: returns to let it deliver; holds it (and never returns) while a
        drain or stop is on."""
        with self._lock:
            if not self.requested.is_set():
                self._busy[query] += 1
                return
        hold(sleep, lambda: self.stopping(query))

    def leave(
        self, query: str, route: str, batch_id: int, results: list[TaskResult] | None
    ) -> None:
        """A batch that entered has ended; ``results`` is ``None`` when it failed."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            self._busy[query] -= 1
            if results is None:
                return
            self._completed[query] = max(batch_id, self._completed.get(query, -1))
            tally = self._tallies.setdefault(route, RouteTally())
            tally.parked = {t: nb for t, nb in tally.parked.items() if nb > now_ms}
            tally.parked.update(p for r in results for p in r.running_parked)
            if self.requested.is_set():
                tally.finished += answered(results)
                tally.handed += handed_unsent(results)

    def failed(self, query: str, sleep: Sleep) -> None:
        """A batch failed: while its query is being stopped that is the stop, so hold it until
        the stop reaches it and end it as one (``DrainStopped``); else return."""
        if self.hard.is_set() or self.stopping(query):
            hold(sleep, lambda: self.stopping(query))

    def progressed(self, query: str, batch_id: int) -> None:
        """Spark reported ``batch_id`` of ``query``: it is committed."""
        with self._lock:
            self._progressed[query] = max(batch_id, self._progressed.get(query, -1))

    def quiet(self, queries: Iterable[str]) -> bool:
        """No batch of ``queries`` is delivering, and each one they finished is committed."""
        with self._lock:
            return all(
                self._busy[q] <= 0 and self._progressed.get(q, -1) >= self._completed.get(q, -1)
                for q in queries
            )

    def busy(self, queries: Iterable[str]) -> int:
        with self._lock:
            return sum(max(0, self._busy[q]) for q in queries)

    # --- parked calls ----------------------------------------------------------------------

    def settle(self, route: str, known: Callable[[Collection[str]], Mapping[str, Any]]) -> None:
        """Forget the parked calls of ``route`` that ``known`` has answers for (counted as
        finished during a drain) or that are past due (their answer will not come)."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            tally = self._tallies.setdefault(route, RouteTally())
            tokens = set(tally.parked)
        settled = known(tokens) if tokens else {}
        with self._lock:
            tally = self._tallies[route]
            for token in settled:
                if tally.parked.pop(token, None) is not None and self.requested.is_set():
                    tally.finished += 1
            for token, not_before in list(tally.parked.items()):
                if not_before <= now_ms:
                    del tally.parked[token]
                    if self.requested.is_set():
                        tally.handed += 1

    def waiting_calls(self, route: str) -> int:
        with self._lock:
            return len(self._tallies.get(route, RouteTally()).parked)

    # --- the drain itself ------------------------------------------------------------------

    def begin(self) -> bool:
        """Start the drain; ``False`` when it had begun already. Writes the workers' files."""
        with self._lock:
            if self.requested.is_set():
                return False
            self.began = time.monotonic()
            self.requested.set()
        for route in self._timeouts:
            path = self.signal_file(route)
            if path:
                Path(path).write_text(f"{time.time() + self._timeouts[route]:.3f}\n")
        return True

    def deadline(self, route: str) -> float:
        """When ``route``'s drain gives up waiting (monotonic)."""
        return self.began + self._timeouts.get(route, 0.0)

    def finish(self, route: str) -> RouteTally:
        """``route``'s drain is over: its tally, with the time it took."""
        with self._lock:
            tally = self._tallies.setdefault(route, RouteTally())
            if tally.seconds is None:
                tally.seconds = time.monotonic() - self.began
            return tally

    def stop(self, query: str) -> None:
        """``query`` is about to be stopped: a batch of it that is held or fails now ends."""
        with self._lock:
            self._stopping.add(query)

    def stopping(self, query: str) -> bool:
        with self._lock:
            return query in self._stopping
