"""A task's progress record (docs/replay.md): ACKs noted as they come, written every
``progress_interval`` when they changed, at once every ``progress_every`` ACKs and when every
call of the slice has answered, and the whole slice once the task's own writes were
acknowledged. Writes never wait and never fail the task: a progress record only states what is
already durable, so one that is lost costs duplicates after a crash, never a record.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from siding.kafka.reader import read_to_end
from siding.model import Delivery, Ordering, Outcome, OutcomeKind
from siding.pipeline.executor.plan import TaskPlan
from siding.pipeline.executor.progress import (
    Coord,
    Known,
    Mark,
    ProgressPlan,
    Ranges,
    covers,
    decode,
    done_map,
    encode,
    known_for,
    merge_maps,
    restrict,
    split,
    write_now,
)
from siding.pipeline.executor.rows import Incoming
from siding.pipeline.executor.worker import runtime
from siding.routing.producer import OutRecord
from siding.transport.base import Transport

log = logging.getLogger(__name__)

Produce = Callable[[OutRecord], None]
READ_TIMEOUT_S = 30.0
# A progress record is sent at once: one record stands for many ACKs, so batching gains
# nothing, and a record still lingering in the producer at a SIGKILL is lost.
PRODUCER_CONF = {"linger.ms": 0}


class Tracker:
    """One task's progress. ``answered`` (and ``acked``) is called on the worker's loop, the
    rest from the task's thread; the timer runs on the loop. A closed tracker writes nothing
    more, so a late tick cannot overwrite the final record with less."""

    def __init__(
        self,
        plan: ProgressPlan | None,
        task: int,
        produce: Produce | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        known: Callable[[], Known] | None = None,
    ) -> None:
        self._plan = plan
        self._task = task
        self._produce = produce
        self._loop = loop
        self._known = known or (lambda: plan.known if plan is not None else Known())
        self._lock = threading.Lock()
        self._acked: dict[Coord, Ranges] = {}
        self._new_acks: list[Delivery] = []  # folded into ``_acked`` when written
        self._carried = Known()
        self._written: dict[Coord, Ranges] = {}
        self._version = 0
        self._written_version = 0
        self._answered = 0
        self._expected = 0
        self._closed = plan is None or produce is None
        self._timer: asyncio.TimerHandle | None = None
        self.slice: list[Delivery] = []
        self.skipped = 0

    def screen(self, plan: TaskPlan, items: Sequence[Incoming]) -> list[Incoming]:
        """The items to dispatch: those known done are left out (counted in ``skipped``).
        Starts the tracker with what is known of this slice, so its records keep it."""
        if self._closed:
            return list(items)
        known = self._known()
        self.slice = [i.delivery for i in items]
        keep, skip = split(
            self.slice, known, lane=plan.lane, ordering=plan.route.ordering, waiting=plan.waiting
        )
        self.skipped = len(skip)
        self._carried = restrict(known, [self.slice[i] for i in skip])
        if self._loop is not None and self._plan is not None and self._plan.interval_s > 0:
            self._loop.call_soon_threadsafe(self._schedule)
        return [items[i] for i in keep]

    def expect(self, calls: int) -> None:
        """The task is about to dispatch ``calls`` records: once as many calls have answered,
        what they ACKed is written at once."""
        with self._lock:
            self._expected = calls

    def watch(self, transport: Transport) -> Transport:
        return transport if self._closed else _Watched(transport, self.answered)

    def acked(self, delivery: Delivery) -> None:
        self.answered(delivery, acked=True)

    def answered(self, delivery: Delivery, *, acked: bool) -> None:
        """A call of the slice answered (``acked``: with an ACK that is done once noted)."""
        with self._lock:
            if self._closed:
                return
            self._answered += 1
            if acked:
                self._new_acks.append(delivery)
                self._version += 1
            every = self._plan.every if self._plan is not None else 0
            if write_now(
                len(self._new_acks), every=every, answered=self._answered, expected=self._expected
            ):
                self._write_locked()

    def written(self, plan: TaskPlan, pending: Collection[str] = ()) -> None:
        """The task's records were written. In unordered mode the whole slice is durable but
        the records whose ids are ``pending`` (dead letters the driver writes later); key mode
        keeps ACKs only (a lane or hold record's key state is the driver's, written after the
        tasks: a replay must dispatch it again to report it)."""
        if plan.route.ordering is Ordering.UNORDERED:
            self.finish([d for d in self.slice if d.id not in pending])
        else:
            self.close()

    def finish(self, written: Iterable[Delivery]) -> None:
        """Every record of ``written`` is durable: write that and stop. A slice whose records
        were all ACKed and recorded already (every call answered) is not written again."""
        with self._lock:
            if self._closed:
                return
            self._written = done_map(written)
            known = merge_maps(
                self._acked,
                done_map(self._new_acks),
                self._carried.acked,
                self._carried.written,
            )
            if not covers(known, self._written):
                self._version += 1
        self.close()

    def close(self) -> None:
        """Write what is known (if anything changed) and stop."""
        with self._lock:
            if self._closed:
                return
            self._write_locked()
            self._closed = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel)

    def _schedule(self) -> None:
        if not self._closed and self._plan is not None and self._loop is not None:
            self._timer = self._loop.call_later(self._plan.interval_s, self._tick)

    def _tick(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._write_locked()
        self._schedule()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _write_locked(self) -> None:
        if self._version == self._written_version or self._plan is None or self._produce is None:
            return
        plan = self._plan
        if self._new_acks:
            self._acked = merge_maps(self._acked, done_map(self._new_acks))
            self._new_acks.clear()
        known = Known(self._acked, self._written).union(self._carried)
        mark = Mark(plan.query, self._task, plan.query_id, plan.batch, known)
        try:
            self._produce(encode(plan.topic, mark))
        except Exception as exc:  # a lost progress record costs duplicates only
            log.warning("progress of %s batch %d not written: %s", plan.query, plan.batch, exc)
        self._written_version = self._version


class _Watched:
    """A transport that tells the tracker of every ACK."""

    def __init__(self, inner: Transport, on_answer: Callable[..., None]) -> None:
        self._inner = inner
        self._on_answer = on_answer

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        try:
            outcome = await self._inner.send(delivery, deadline_s)
        except BaseException:
            self._on_answer(delivery, acked=False)
            raise
        # An ACK that asks for records to be written (consumer outputs) is not done before they
        # are: the task's final record covers it, once its writes were acknowledged.
        self._on_answer(delivery, acked=outcome.kind is OutcomeKind.ACK and not outcome.outputs)
        return outcome

    async def probe(self) -> bool:
        return await self._inner.probe()

    async def close(self) -> None:
        await self._inner.close()


def async_produce(producer: Any) -> Produce:
    """Produce on a confluent-kafka producer without waiting for the acknowledgement."""

    def produce(record: OutRecord) -> None:
        producer.produce(record.topic, key=record.key, value=record.value)
        producer.poll(0)

    return produce


def known_of_attempt(
    plan: ProgressPlan, attempt: int, read: Callable[[], Sequence[tuple[bytes, bytes | None]]]
) -> Known:
    """What the driver passed, plus, for a task Spark runs again (``attempt`` > 0: its worker
    died), what the earlier attempts of this batch recorded."""
    if attempt <= 0:
        return plan.known
    try:
        marks = [m for key, value in read() if (m := decode(key, value)) is not None]
    except Exception as exc:  # nothing more known: delivered again
        log.warning("progress of %s batch %d not read: %s", plan.query, plan.batch, exc)
        return plan.known
    return plan.known.union(known_for(marks, plan.query, plan.query_id, plan.batch))


def task_attempt() -> int:
    """Spark's attempt number of the running task (0 outside Spark)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def begin(plan: TaskPlan, partition_id: int) -> Tracker:
    """The tracker of one task (a disabled one when the plan records no progress)."""
    progress = plan.progress
    if progress is None:
        return Tracker(None, partition_id)
    rt = runtime()
    producer = rt.producer({**plan.client_conf, **PRODUCER_CONF}, use="progress").producer
    conf = plan.client_conf

    def known() -> Known:
        return known_of_attempt(
            progress, task_attempt(), lambda: read_to_end(conf, progress.topic, READ_TIMEOUT_S)
        )

    return Tracker(progress, partition_id, async_produce(producer), rt.loop, known)
