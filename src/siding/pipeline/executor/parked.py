"""Calls that outlived their batch, kept running in the worker until they answer (executor side).

Each answer becomes a settlement record in the route's ``settled`` state topic, written
durably after the answer's outputs (docs/outputs.md); the park lane finishes the parked record
from it. If the worker dies first, no settlement is written and the park lane delivers the
record again once it is due: nothing is lost, and a crash is the only way to a second delivery
(docs/parking.md).
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
from siding.routing.outputs import output_records
from siding.routing.producer import OutRecord
from siding.routing.settlement import Settlement, settlement_record
from siding.transport.outcomes import not_there

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
    route: str = ""


class ParkedCalls:
    """Lives on the worker's event loop; only ``count`` may be read from another thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._counts: Counter[tuple[str, str]] = Counter()
        # (writer, settlement, the answer's outputs): outputs are written before settlements.
        self._pending: list[tuple[Writer, OutRecord, list[OutRecord]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.settled = 0
        self.unsettled_failures = 0

    def count(self, endpoint: tuple[str, str]) -> int:
        """Parked calls of ``endpoint`` still running in this worker (each holds a slot of the
        route's budget until it answers: docs/dispatch.md, "One budget")."""
        return self._counts[endpoint]

    def adopt(self, calls: Sequence[ParkedCall], adoption: Adoption) -> None:
        """Take over running calls; call on the loop's thread (``call_soon_threadsafe``)."""
        for call in calls:
            self._counts[adoption.endpoint] += 1
            call.task.add_done_callback(functools.partial(self._answered, call, adoption))

    def _answered(
        self, call: ParkedCall, adoption: Adoption, task: asyncio.Task[tuple[Outcome, float]]
    ) -> None:
        token = call.token
        self._counts[adoption.endpoint] -= 1
        if task.cancelled() or task.exception() is not None:
            # No settlement: the park lane delivers the record again when it is due.
            self.unsettled_failures += 1
            log.warning("parked call %s ended without an answer: %r", token, task)
            return
        outcome, latency_s = task.result()
        adoption.breaker.record(outcome.kind, down=not_there(outcome))
        if outcome.kind is not OutcomeKind.BACKOFF and not outcome.no_answer:
            adoption.timer.observe(latency_s)
            adoption.breaker.mark_up()
        outputs = output_records(call.work.delivery, outcome.outputs, adoption.route)
        settlement = Settlement(token, outcome, int(time.time() * 1000), len(outputs))
        self._pending.append(
            (adoption.writer, settlement_record(adoption.settle_topic, settlement), outputs)
        )
        if self._flusher is None or self._flusher.done():
            self._flusher = self._loop.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            by_writer: dict[Writer, tuple[list[OutRecord], list[OutRecord]]] = {}
            for writer, record, outputs in batch:
                settlements, produced = by_writer.setdefault(writer, ([], []))
                settlements.append(record)
                produced += outputs
            for writer, (settlements, produced) in by_writer.items():
                # A settlement says the input is done: its outputs must be in Kafka first. If
                # they cannot be written, the park lane asks the consumer again (a duplicate).
                if produced and not await self._write(writer, produced, len(settlements)):
                    continue
                if await self._write(writer, settlements, len(settlements)):
                    self.settled += len(settlements)

    async def _write(self, writer: Writer, records: list[OutRecord], settlements: int) -> bool:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                await self._loop.run_in_executor(None, writer, records)
            except DurableWriteError as exc:
                if attempt == WRITE_ATTEMPTS or not exc.retriable:  # a lost fence: never
                    # The park lane will deliver these again: a duplicate, never a loss.
                    self.unsettled_failures += settlements
                    log.warning("%d settlement(s) not written: %s", settlements, exc)
                    return False
                await asyncio.sleep(min(10.0, 0.5 * 2**attempt))
            else:
                return True
        return False
