"""Calls that outlived their batch, kept running in the worker until they answer (executor side).

Each answer becomes a settlement record in the route's ``settled`` state topic, written
durably; the park lane finishes the parked record from it. If the worker dies first, no
settlement is written and the park lane delivers the record again once it is due: nothing is
lost, and a crash is the only way to a second delivery (docs/parking.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from siding.dispatch import CircuitBreaker, ParkedCall, ParkTimer
from siding.errors import DurableWriteError
from siding.model import Outcome, OutcomeKind
from siding.routing.producer import OutRecord
from siding.routing.settlement import Settlement, settlement_record

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5
Writer = Callable[[Sequence[OutRecord]], None]


@dataclass(frozen=True, slots=True)
class Adoption:
    """Where the answers of a batch's parked calls go."""

    endpoint: tuple[str, str]
    settle_topic: str
    timer: ParkTimer
    breaker: CircuitBreaker
    writer: Writer


class ParkedCalls:
    """Lives on the worker's event loop; only ``count`` may be read from another thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._counts: Counter[tuple[str, str]] = Counter()
        self._pending: list[tuple[Writer, OutRecord]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.settled = 0
        self.unsettled_failures = 0

    def count(self, endpoint: tuple[str, str]) -> int:
        """Parked calls of ``endpoint`` still running: they count against its in-flight limit."""
        return self._counts[endpoint]

    def adopt(self, calls: Sequence[ParkedCall], adoption: Adoption) -> None:
        """Take over running calls; call on the loop's thread (``call_soon_threadsafe``)."""
        for call in calls:
            self._counts[adoption.endpoint] += 1
            call.task.add_done_callback(functools.partial(self._answered, call.token, adoption))

    def _answered(
        self, token: str, adoption: Adoption, task: asyncio.Task[tuple[Outcome, float]]
    ) -> None:
        self._counts[adoption.endpoint] -= 1
        if task.cancelled() or task.exception() is not None:
            # No settlement: the park lane delivers the record again when it is due.
            self.unsettled_failures += 1
            log.warning("parked call %s ended without an answer: %r", token, task)
            return
        outcome, latency_s = task.result()
        adoption.breaker.record(outcome.kind)
        if outcome.kind is not OutcomeKind.BACKOFF and not outcome.no_answer:
            adoption.timer.observe(latency_s)
            adoption.breaker.mark_up()
        settlement = Settlement(token, outcome, int(time.time() * 1000))
        self._pending.append(
            (adoption.writer, settlement_record(adoption.settle_topic, settlement))
        )
        if self._flusher is None or self._flusher.done():
            self._flusher = self._loop.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            by_writer: dict[Writer, list[OutRecord]] = {}
            for writer, record in batch:
                by_writer.setdefault(writer, []).append(record)
            for writer, records in by_writer.items():
                await self._write(writer, records)

    async def _write(self, writer: Writer, records: list[OutRecord]) -> None:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                await self._loop.run_in_executor(None, writer, records)
            except DurableWriteError as exc:
                if attempt == WRITE_ATTEMPTS:
                    # The park lane will deliver these again: a duplicate, never a loss.
                    self.unsettled_failures += len(records)
                    log.warning("%d settlement(s) not written: %s", len(records), exc)
                    return
                await asyncio.sleep(min(10.0, 0.5 * 2**attempt))
            else:
                self.settled += len(records)
                return
