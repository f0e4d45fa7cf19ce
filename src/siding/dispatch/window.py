"""The in-flight window: deliver one slice with many sends in flight, until each has its step.

The rules (concurrency, not-before, key order, breaker, backoff, stop) are in docs/dispatch.md.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from siding.dispatch import adaptive
from siding.dispatch.breaker import BreakerState, BreakerTransition, CircuitBreaker
from siding.dispatch.errors import DispatchInterrupted
from siding.dispatch.keyorder import Blocker, KeyLines, OrderKey, ParkedRecord, Released, follow
from siding.dispatch.parking import ParkTimer, parked_not_before_ms
from siding.dispatch.ratelimit import TokenBucket
from siding.dispatch.settings import DispatchSettings
from siding.dispatch.stats import StatsRecorder
from siding.dispatch.work import DispatchReport, FinalStep, Parked, ParkedCall, Settled, Work
from siding.errors import EndpointGoneError
from siding.model import Ordering, Outcome, OutcomeKind
from siding.policy import Backoff, Stop, ToLane, next_step
from siding.transport.base import Transport
from siding.transport.outcomes import outcome_from_timeout

# The calls left may be parked as soon as the answers go quiet once they are at most this share
# of the slice (docs/parking.md).
OUTLIER_SHARE = 0.2


def safety_grace_s(deadline_s: float) -> float:
    """How long past its deadline a send may run before the window gives up on it itself."""
    return min(1.0, max(0.05, deadline_s / 10))


async def dispatch(
    transport: Transport,
    work: Sequence[Work],
    settings: DispatchSettings,
    *,
    parked: Mapping[OrderKey, Sequence[ParkedRecord]] | None = None,
    breaker: CircuitBreaker | None = None,
    stop: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
    park_timer: ParkTimer | None = None,
) -> DispatchReport:
    """Deliver ``work`` and return every item with its final step (Done, ToLane or ToDlq).

    ``breaker`` should be the one kept for this transport across batches (a fresh one is made
    when omitted). ``parked`` holds, per key, the records already in retry lanes (``key``
    ordering). ``clock`` is epoch seconds (for not-before times), ``rand`` feeds backoff jitter.
    With ``settings.park`` enabled, calls still running once nothing else is left are handed
    over in ``DispatchReport.parked`` instead of awaited; ``park_timer`` (kept per endpoint)
    learns answer latencies and says when.

    Raises ``EndpointGoneError`` when the endpoint says it is gone, ``DispatchInterrupted`` when
    ``stop`` is set before every item has its step.
    """
    if breaker is None:
        breaker = CircuitBreaker(settings.breaker, transport.probe)
    window = _Window(
        transport,
        work=work,
        settings=settings,
        parked=parked or {},
        breaker=breaker,
        stop=stop,
        clock=clock,
        rand=rand,
        park_timer=park_timer or ParkTimer(),
    )
    return await window.run()


class _Window:
    def __init__(
        self,
        transport: Transport,
        *,
        work: Sequence[Work],
        settings: DispatchSettings,
        parked: Mapping[OrderKey, Sequence[ParkedRecord]],
        breaker: CircuitBreaker,
        stop: asyncio.Event | None,
        clock: Callable[[], float],
        rand: Callable[[], float],
        park_timer: ParkTimer,
    ) -> None:
        self._transport = transport
        self._work = work
        self._settings = settings
        self._breaker = breaker
        self._stop = stop
        self._clock = clock
        self._rand = rand
        self._lines = KeyLines([w.delivery for w in work], settings.ordering, parked)
        self._steps: list[FinalStep | None] = [None] * len(work)
        self._unsettled = len(work)
        # (due epoch ms, sequence, index): items waiting for their time without holding a slot.
        self._due: list[tuple[int, int, int]] = []
        self._seq = 0
        self._backoffs: dict[int, int] = {}
        # When each item was first told "back off", and when the endpoint last really answered.
        self._backoff_since_ms: dict[int, int] = {}
        self._last_served_ms = 0
        self._in_flight: set[asyncio.Task[tuple[Outcome, float]]] = set()
        self._answers: deque[tuple[int, asyncio.Task[tuple[Outcome, float]]]] = deque()
        self._wake = asyncio.Event()
        self._limit = adaptive.initial_limit(settings.max_in_flight, settings.adaptive)
        self._bucket = (
            TokenBucket(settings.rate_limit, settings.rate_burst) if settings.rate_limit else None
        )
        self._stats = StatsRecorder()
        self._breaker_wait: asyncio.Task[None] | None = None
        self._breaker_wait_since = 0.0
        self._park_timer = park_timer
        self._may_park = settings.park.enabled and settings.ordering is Ordering.UNORDERED
        # index -> (send, its done-callback, started monotonic, started epoch ms)
        self._running: dict[int, tuple[asyncio.Task[tuple[Outcome, float]], _Callback, float, int]]
        self._running = {}
        self._parked: list[ParkedCall] = []
        self._last_answer_at = 0.0
        self._park_after_s = park_timer.park_after_s(settings.park)

    async def run(self) -> DispatchReport:
        remove_listener = self._breaker.add_listener(self._on_breaker_change)
        stop_watch = asyncio.create_task(self._stop.wait()) if self._stop else None
        if stop_watch is not None:
            stop_watch.add_done_callback(lambda _: self._wake.set())
        try:
            self._release(self._lines.start())
            while self._unsettled:
                self._wake.clear()
                if self._stop is not None and self._stop.is_set():
                    raise DispatchInterrupted(
                        f"dispatch stopped with {self._unsettled} of {len(self._work)} items"
                        " without a step"
                    )
                self._take_answers()
                self._check_breaker_wait()
                if not self._unsettled:
                    break
                wait_s = self._launch()
                park_in = self._park_in()
                if park_in is not None and park_in <= 0:
                    self._park_running()
                    break
                await self._sleep(_earliest(wait_s, park_in))
        finally:
            remove_listener()
            await self._cancel_all(stop_watch)
        return self._report()

    def _launch(self) -> float | None:
        """Start every send that may start now; the seconds until one may start by time alone."""
        now_ms = self._now_ms()
        while self._due:
            due_ms, _, index = self._due[0]
            if due_ms > now_ms:
                return (due_ms - now_ms) / 1000
            if len(self._in_flight) >= self._limit.current:
                return None
            if self._breaker.state is not BreakerState.CLOSED:
                self._wait_for_breaker()
                return None
            if self._bucket is not None and not self._bucket.try_take():
                return self._bucket.wait_s()
            heapq.heappop(self._due)
            self._start_send(index)
        return None

    def _start_send(self, index: int) -> None:
        task = asyncio.create_task(self._send(index))
        self._in_flight.add(task)
        self._stats.sent(len(self._in_flight))

        def answered(done: asyncio.Task[tuple[Outcome, float]]) -> None:
            self._in_flight.discard(done)
            self._running.pop(index, None)
            self._answers.append((index, done))
            self._wake.set()

        task.add_done_callback(answered)
        self._running[index] = (task, answered, time.monotonic(), self._now_ms())

    def _park_in(self) -> float | None:
        """Seconds until every call still out may be parked; ``None`` while anything else is
        left (items not yet sent, answers not yet read) or parking is off.

        A call may be parked once it has run ``park_after_s`` (from the answer times of earlier
        slices: this slice's first answers are the head of its queue), or, when the calls left
        are a small share of the slice, once the answers have gone quiet for ``park.floor_s``:
        the rest of the batch is done and these are its outliers."""
        if not self._may_park or self._due or self._answers:
            return None
        if not self._running or len(self._running) != self._unsettled:
            return None
        if any(task.done() for task, *_ in self._running.values()):
            return None
        youngest = max(started for _, _, started, _ in self._running.values())
        at = youngest + self._park_after_s
        if len(self._running) <= max(1, len(self._work) * OUTLIER_SHARE):
            at = min(at, max(self._last_answer_at, youngest) + self._settings.park.floor_s)
        return at - time.monotonic()

    def _park_running(self) -> None:
        """End the dispatch now: every call still out keeps running, handed over as parked."""
        deadline_s = self._settings.deadline_s
        grace_s = safety_grace_s(deadline_s)
        for index, (task, answered, _, started_ms) in sorted(self._running.items()):
            task.remove_done_callback(answered)
            self._in_flight.discard(task)
            token = uuid.uuid4().hex
            step = Parked(token, parked_not_before_ms(started_ms, deadline_s, grace_s))
            self._parked.append(ParkedCall(self._work[index], token, task))
            self._stats.parked()
            self._settle(index, step)
        self._running.clear()

    async def _send(self, index: int) -> tuple[Outcome, float]:
        delivery = self._work[index].delivery
        deadline_s = self._work[index].deadline_s or self._settings.deadline_s
        started = time.monotonic()
        # The transport keeps the deadline itself; this is the net for one that does not.
        try:
            async with asyncio.timeout(deadline_s + safety_grace_s(deadline_s)) as net:
                outcome = await self._transport.send(delivery, deadline_s)
        except TimeoutError:
            if not net.expired():
                raise
            outcome = outcome_from_timeout(deadline_s)
        return outcome, time.monotonic() - started

    def _take_answers(self) -> None:
        while self._answers:
            index, task = self._answers.popleft()
            if task.cancelled():
                # Only _cancel_all cancels sends, and it reads no answers after: a transport did.
                raise RuntimeError(f"the send of {self._work[index].delivery.id} was cancelled")
            outcome, latency_s = task.result()
            self._on_answer(index, outcome, latency_s)

    def _on_answer(self, index: int, outcome: Outcome, latency_s: float) -> None:
        delivery = self._work[index].delivery
        self._breaker.record(outcome.kind)
        self._limit = adaptive.update(
            self._limit, outcome.kind, latency_s, time.monotonic(), self._settings.adaptive
        )
        self._stats.answered(outcome.kind, latency_s)
        self._last_answer_at = time.monotonic()
        if outcome.kind is not OutcomeKind.BACKOFF and not outcome.no_answer:
            self._park_timer.observe(latency_s)
        now_ms = self._now_ms()
        outcome = self._singled_out(index, outcome, now_ms)
        consecutive = self._backoffs.get(index, 0) + 1
        step = next_step(
            outcome,
            delivery.attempt,
            self._settings.lanes,
            now_ms,
            max_retry_after_s=self._settings.max_retry_after_s,
            consecutive_backoffs=consecutive,
            rand=self._rand(),
        )
        if isinstance(step, Stop):
            raise EndpointGoneError(f"{delivery.id}: {step.reason}")
        if isinstance(step, Backoff):
            # Redeliver in place: the attempt is not spent, only time.
            self._backoffs[index] = consecutive
            self._schedule(index, now_ms + math.ceil(step.delay_s * 1000))
            return
        self._backoffs.pop(index, None)
        self._settle(index, step)

    def _singled_out(self, index: int, outcome: Outcome, now_ms: int) -> Outcome:
        """A message that has been told "back off" for longer than a deadline while the endpoint
        went on serving other messages is not a sign of an endpoint that is down: move it to a
        retry lane, or it would hold its batch, and the partition, forever. With no message
        served meanwhile (an outage), it keeps waiting behind the breaker."""
        if outcome.kind is not OutcomeKind.BACKOFF:
            self._backoff_since_ms.pop(index, None)
            if not outcome.no_answer:
                self._last_served_ms = now_ms
            return outcome
        since = self._backoff_since_ms.setdefault(index, now_ms)
        waited_s = (now_ms - since) / 1000
        if waited_s <= self._settings.deadline_s or self._last_served_ms <= since:
            return outcome
        self._backoff_since_ms.pop(index, None)
        return Outcome(
            OutcomeKind.RETRY,
            f"told to back off for {waited_s:.0f}s while the endpoint served other messages:"
            f" {outcome.reason}",
        )

    def _settle(self, index: int, step: FinalStep) -> None:
        self._steps[index] = step
        self._unsettled -= 1
        blocker = None
        if isinstance(step, ToLane):
            blocker = Blocker(self._work[index].delivery.id, step.lane, step.not_before_ms)
        self._release(self._lines.settle(index, blocker))

    def _release(self, released: Released) -> None:
        for index in released.send:
            self._schedule(index, self._work[index].not_before_ms)
        for index, blocker in released.follow:
            self._steps[index] = follow(blocker)
            self._unsettled -= 1
            self._stats.followed()

    def _schedule(self, index: int, due_ms: int) -> None:
        self._seq += 1
        heapq.heappush(self._due, (due_ms, self._seq, index))

    def _wait_for_breaker(self) -> None:
        if self._breaker_wait is not None:
            return
        self._breaker_wait_since = time.monotonic()
        self._breaker_wait = asyncio.create_task(self._breaker.wait_closed())
        self._breaker_wait.add_done_callback(lambda _: self._wake.set())

    def _check_breaker_wait(self) -> None:
        task = self._breaker_wait
        if task is None or not task.done():
            return
        self._breaker_wait = None
        self._stats.waited_on_breaker(time.monotonic() - self._breaker_wait_since)
        task.result()

    def _on_breaker_change(self, transition: BreakerTransition) -> None:
        self._stats.breaker_changed(transition)
        self._wake.set()

    async def _sleep(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def _cancel_all(self, stop_watch: asyncio.Task[bool] | None) -> None:
        tasks: list[asyncio.Task[object]] = [*self._in_flight]
        if self._breaker_wait is not None:
            tasks.append(self._breaker_wait)
            self._stats.waited_on_breaker(time.monotonic() - self._breaker_wait_since)
            self._breaker_wait = None
        if stop_watch is not None:
            tasks.append(stop_watch)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _report(self) -> DispatchReport:
        settled = []
        for work, step in zip(self._work, self._steps, strict=True):
            if step is None:
                # A bug in the window, never a property of the data.
                raise RuntimeError(f"dispatch lost {work.delivery.id}: no step")
            settled.append(Settled(work, step))
        return DispatchReport(
            tuple(settled), self._stats.snapshot(self._limit.current), tuple(self._parked)
        )


_Callback = Callable[[asyncio.Task[tuple[Outcome, float]]], None]


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
