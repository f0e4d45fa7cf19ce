"""The in-flight window: deliver one slice with many sends in flight, until each has its step.

The rules (concurrency, not-before, key order, breaker, backoff, stop) are in docs/dispatch.md.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, assert_never

from siding.dispatch import adaptive
from siding.dispatch.breaker import BreakerState, BreakerTransition, CircuitBreaker
from siding.dispatch.budget import Budget, Lease
from siding.dispatch.errors import DispatchInterrupted
from siding.dispatch.inbatch import (
    leaving,
    only_waiting,
    read_before_due,
    retry_in_batch,
    wait_until,
)
from siding.dispatch.keyorder import Blocker, KeyLines, OrderKey, Released, WaitingRecord, follow
from siding.dispatch.parking import ParkTimer, parked_not_before_ms
from siding.dispatch.ratelimit import TokenBucket
from siding.dispatch.settings import DispatchSettings
from siding.dispatch.stats import StatsRecorder
from siding.dispatch.suspects import Conviction, Suspects
from siding.dispatch.trace import SuspectTrace
from siding.dispatch.work import DispatchReport, ParkedCall, Settled, Work
from siding.errors import EndpointGoneError
from siding.model import Ordering, Outcome, OutcomeKind
from siding.policy import next_step
from siding.steps import Backoff, Done, FinalStep, Parked, Resent, Step, Stop, ToDlq, ToLane
from siding.transport.base import Transport
from siding.transport.outcomes import not_there, outcome_from_timeout
from siding.transport.outputs import screen_outputs

log = logging.getLogger(__name__)

# The calls left may be parked as soon as the answers go quiet once they are at most this share
# of the slice (docs/parking.md).
OUTLIER_SHARE = 0.2
# A message turned away again and again is logged at each step while at most this many of the
# slice's messages are turned away (more than that is an outage: the breaker's log tells it).
HOLDOUT_LOG_MAX = 10
# The park lane hands suspects back to the park topic only when the next is not due for this
# long: a turn that comes sooner is cheaper to wait for in the batch.
HAND_BACK_MIN_S = 1.0


def safety_grace_s(deadline_s: float) -> float:
    """How long past its deadline a send may run before the window gives up on it itself."""
    return min(1.0, max(0.05, deadline_s / 10))


async def dispatch(
    transport: Transport,
    work: Sequence[Work],
    settings: DispatchSettings,
    *,
    waiting: Mapping[OrderKey, Sequence[WaitingRecord]] | None = None,
    breaker: CircuitBreaker | None = None,
    stop: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
    park_timer: ParkTimer | None = None,
    drain: asyncio.Event | None = None,
    limits: dict[int, adaptive.Limit] | None = None,
    budget: Budget | None = None,
    trace: SuspectTrace | None = None,
) -> DispatchReport:
    """Deliver ``work`` and return every item with its final step (Done, ToLane or ToDlq).

    ``breaker`` should be the one kept for this transport across batches (a fresh one is made
    when omitted). ``waiting`` holds, per key, the records already out of the line, in retry
    lanes or held (``key`` ordering). ``clock`` is epoch seconds (for not-before times),
    ``rand`` feeds backoff jitter.
    With ``settings.park`` enabled, calls still running once nothing else is left are handed
    over in ``DispatchReport.parked`` instead of awaited; ``park_timer`` (kept per endpoint)
    learns answer latencies and says when. Once ``drain`` is set (a draining stop), nothing more
    is sent: calls still out are parked and items not sent yet are handed to the park lane
    unsent (parking routes only; others go on to the end). ``limits`` (kept per endpoint, by
    lane) carries the latency limit (``adaptive.latency``) from one dispatch to the next; a fresh
    one starts at the top. Without the latency limit every dispatch starts at the top. ``budget``
    is the in-flight and rate budget of the route and endpoint, shared with every other window
    sending there (a call holds its slot until it ends, parked or not); it replaces
    ``settings.rate_limit``. ``trace`` says where the suspects' trace lines come from
    (``siding.dispatch.trace``).

    Raises ``EndpointGoneError`` when the endpoint says it is gone, ``DispatchInterrupted`` when
    ``stop`` is set before every item has its step.
    """
    if breaker is None:
        breaker = CircuitBreaker(settings.breaker, transport.probe)
    window = _Window(
        transport,
        work=work,
        settings=settings,
        waiting=waiting or {},
        breaker=breaker,
        stop=stop,
        clock=clock,
        rand=rand,
        park_timer=park_timer or ParkTimer(),
        drain=drain,
        limits=limits,
        budget=budget,
        trace=trace,
    )
    return await window.run()


class _Window:
    def __init__(
        self,
        transport: Transport,
        *,
        work: Sequence[Work],
        settings: DispatchSettings,
        waiting: Mapping[OrderKey, Sequence[WaitingRecord]],
        breaker: CircuitBreaker,
        stop: asyncio.Event | None,
        clock: Callable[[], float],
        rand: Callable[[], float],
        park_timer: ParkTimer,
        drain: asyncio.Event | None = None,
        limits: dict[int, adaptive.Limit] | None = None,
        budget: Budget | None = None,
        trace: SuspectTrace | None = None,
    ) -> None:
        self._transport = transport
        self._trace = trace or SuspectTrace(f"lane={settings.lane}")
        self._budget = budget
        self._drain = drain
        # An item retried inside this dispatch is replaced by its retry (``_retry_here``).
        self._work = list(work)
        self._settings = settings
        self._breaker = breaker
        self._stop = stop
        self._clock = clock
        self._rand = rand
        self._lines = KeyLines([w.delivery for w in work], settings.ordering, waiting)
        self._steps: list[Step | None] = [None] * len(work)
        self._unsettled = len(work)
        # (due epoch ms, sequence, index): items waiting for their time without holding a slot.
        self._due: list[tuple[int, int, int]] = []
        self._seq = 0
        self._backoffs: dict[int, int] = {}
        # When each item was first told "back off", and the breaker's ``ups`` then.
        self._backoff_since: dict[int, tuple[int, int]] = {}
        self._suspects = Suspects(settings.crash_limit)
        # Suspects that alone killed the consumer, waiting for it to be back (breaker CLOSED).
        self._recovering: set[int] = set()
        for index, item in enumerate(work):
            self._suspects.seed(index, item.deaths, breaker.served, item.lone)
            if item.deaths:
                self._trace("seed", item.delivery.id, deaths=item.deaths, lone=item.lone)
        self._in_flight: set[asyncio.Task[tuple[Outcome, float]]] = set()
        self._answers: deque[tuple[int, asyncio.Task[tuple[Outcome, float]]]] = deque()
        self._wake = asyncio.Event()
        self._limits = limits
        # A dispatch that keeps no limit starts at the top; with the latency limit on, a kept
        # one goes on, and a fresh one starts at the top and descends to find the consumer's
        # unloaded latency (off, ``rebound`` starts each at the top).
        self._limit = (
            adaptive.initial_limit(settings.max_in_flight, settings.adaptive)
            if limits is None
            else adaptive.rebound(
                limits.get(settings.lane), settings.max_in_flight, settings.adaptive
            )
        )
        if limits is not None:
            limits[settings.lane] = self._limit
        self._bucket = (
            TokenBucket(settings.rate_limit, settings.rate_burst)
            if settings.rate_limit and budget is None
            else None
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
        # Key mode: retries waiting in the batch for their time; index -> (the work that
        # failed, its step), what the item becomes if the retry must leave the batch (for a
        # retried record read back before its time: itself, written back unchanged).
        self._waiters: dict[int, tuple[Work, ToLane | Resent]] = {}
        # Until when the batch waits for them once it has nothing else to do (decided then).
        self._wait_until_ms: int | None = None

    async def run(self) -> DispatchReport:
        remove_listener = self._breaker.add_listener(self._on_breaker_change)
        unwatch = self._budget.watch(self._wake) if self._budget is not None else None
        watches = [asyncio.create_task(e.wait()) for e in (self._stop, self._drain) if e]
        for watch in watches:
            watch.add_done_callback(lambda _: self._wake.set())
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
                self._maybe_give_up()
                if not self._unsettled:
                    break
                if self._may_park and self._drain is not None and self._drain.is_set():
                    self._hand_over_all()
                    break
                if self._may_park and self._unsettled == len(self._suspects):
                    self._hand_over_suspects()
                    break
                if self._settings.hand_back and self._hand_back():
                    break
                wait_s = self._launch()
                park_in = self._park_in()
                if park_in is not None and park_in <= 0:
                    self._park_running()
                    break
                await self._sleep(_earliest(wait_s, park_in))
        finally:
            remove_listener()
            if unwatch is not None:
                unwatch()
            await self._cancel_all(watches)
        return self._report()

    def _launch(self) -> float | None:
        """Start every send that may start now; the seconds until one may start by time alone."""
        now_ms = self._now_ms()
        return _earliest(self._launch_suspect(now_ms), self._launch_due(now_ms))

    def _may_start(self, *, take: bool = True) -> float | bool | None:
        """True when a send may start now (taking a rate-limit token unless ``take`` is off);
        else what ``_launch`` should return."""
        if len(self._in_flight) >= self._limit.current:
            return None
        if self._breaker.state is not BreakerState.CLOSED:
            self._wait_for_breaker()
            return None
        if self._bucket is not None:
            wait_s = self._bucket.wait_s()
            if wait_s > 0 or (take and not self._bucket.try_take()):
                return wait_s
        return True

    def _launch_suspect(self, now_ms: int) -> float | None:
        """Send the suspects whose turn it is (docs/dispatch.md, "Suspects")."""
        while True:
            due_ms = self._suspects.next_due_ms()
            if due_ms is None:
                return None
            if due_ms > now_ms:
                return (due_ms - now_ms) / 1000
            may = self._may_start(take=False)
            if may is not True:
                return may
            # Whether one may go before a slot is taken: a slot given back at once would wake
            # this window before it ever awaits, and it would spin, starving the loop whose
            # answers it waits for.
            index, wait_s = self._suspects.next_up(now_ms, time.monotonic())
            if index is None:
                return wait_s
            lease = self._lease()
            if not isinstance(lease, _Lease):
                return lease
            index, _ = self._suspects.take(now_ms, time.monotonic())
            assert index is not None  # next_up said so, and nothing ran in between
            self._trace_suspect("send", index, others_out=len(self._suspects.out) - 1)
            if self._bucket is not None:
                self._bucket.try_take()  # there is one: wait_s() was 0
            self._start_send(index, lease)

    def _launch_due(self, now_ms: int) -> float | None:
        while self._due:
            due_ms, _, index = self._due[0]
            if due_ms > now_ms:
                return (due_ms - now_ms) / 1000
            may = self._may_start()
            if may is not True:
                return may
            lease = self._lease()
            if not isinstance(lease, _Lease):
                return lease
            heapq.heappop(self._due)
            self._waiters.pop(index, None)  # its time came: it is the retry's send
            self._start_send(index, lease)
        return None

    def _lease(self) -> _Lease | float | None:
        """A slot of the route's budget (or none needed), else what ``_launch`` should return:
        the seconds until the budget may have one (``None``: until a slot is given back here)."""
        if self._budget is None:
            return _NO_LEASE
        lease = self._budget.take()
        if isinstance(lease, float):
            return None if math.isinf(lease) else lease
        return _Lease(lease)

    def _start_send(self, index: int, lease: _Lease) -> None:
        task = asyncio.create_task(self._send(index))
        # Answered, timed out or cancelled (even before it ran): the call is over at the
        # consumer's end too, and its slot goes back. Added before ``answered`` so that both run
        # before the window's loop does: it wakes once, with the answer and the slot.
        task.add_done_callback(lambda _: lease.release())
        self._in_flight.add(task)
        self._stats.sent(len(self._in_flight))
        self._keep_limit(adaptive.on_send(self._limit, len(self._in_flight)))

        def answered(done: asyncio.Task[tuple[Outcome, float]]) -> None:
            self._in_flight.discard(done)
            self._running.pop(index, None)
            self._answers.append((index, done))
            self._wake.set()

        task.add_done_callback(answered)
        self._running[index] = (task, answered, time.monotonic(), self._now_ms())

    def _keep_limit(self, limit: adaptive.Limit) -> None:
        """The adaptive limit now, kept for the next dispatch of this endpoint and lane."""
        if limit is self._limit:
            return
        self._limit = limit
        if self._limits is not None:
            self._limits[self._settings.lane] = self._limit

    def _park_in(self) -> float | None:
        """Seconds until every call still out may be parked; ``None`` while anything else is
        left (items not yet sent, answers not yet read) or parking is off.

        A call may be parked once it has run ``park_after_s`` (from the answer times of earlier
        slices: this slice's first answers are the head of its queue), or, when the calls left
        are a small share of the slice, once the answers have gone quiet for ``park.floor_s``:
        the rest of the batch is done and these are its outliers."""
        if not self._may_park or self._due or self._answers or self._suspects:
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

    def _hand_over_suspects(self) -> None:
        """Only suspects are left: the park lane isolates them (docs/dispatch.md, "Suspects"),
        so that the batch, and the partition's main line, need not wait for the consumer's
        restarts. A suspect out keeps running, parked like any call; one waiting is due at once.
        """
        deadline_s = self._settings.deadline_s
        grace_s = safety_grace_s(deadline_s)
        now_ms = self._now_ms()
        for index in sorted({*self._suspects.out, *self._suspects.waiting()}):
            deaths = self._suspects.deaths(index)
            lone = self._suspects.carried_lone(index, self._breaker.served)
            token = uuid.uuid4().hex
            running = self._running.pop(index, None)
            if running is None:
                step = Parked(token, now_ms, deaths, lone)
            else:
                task, answered, _, started_ms = running
                task.remove_done_callback(answered)
                self._in_flight.discard(task)
                not_before_ms = parked_not_before_ms(started_ms, deadline_s, grace_s)
                step = Parked(token, not_before_ms, deaths, lone)
                self._parked.append(ParkedCall(self._work[index], token, task))
            self._trace_suspect("hand-over", index, carried_lone=lone, out=running is not None)
            self._stats.handed_over()
            self._settle(index, step)

    def _hand_back(self) -> bool:
        """The park lane: when only suspects that killed the consumer alone are left, each
        waiting for its next turn, they go back to the park topic due at that turn, so that
        this batch ends and what was handed over meanwhile is not held behind the conviction
        (docs/dispatch.md, "Suspects")."""
        if self._unsettled != len(self._suspects) or self._recovering:
            return False
        if self._in_flight or self._answers or self._due:
            return False
        if self._breaker.state is not BreakerState.CLOSED:
            return False
        now_ms = self._now_ms()
        back = self._suspects.to_hand_back(
            now_ms, self._breaker.served, round(HAND_BACK_MIN_S * 1000)
        )
        if back is None:
            return False
        for index, due_ms in sorted(back.items()):
            deaths = self._suspects.deaths(index)
            lone = self._suspects.carried_lone(index, self._breaker.served)
            self._trace_suspect("hand-back", index, carried_lone=lone, due_in_ms=due_ms - now_ms)
            self._stats.handed_over()
            self._settle(index, Parked(uuid.uuid4().hex, due_ms, deaths, lone))
        return True

    def _hand_over_all(self) -> None:
        """A draining stop (docs/operations.md, "Stopping siding"): nothing more is sent. Each
        call still out is parked and keeps running (its answer settles it); each item not sent
        yet goes to the park lane unsent, due at once. The batch can then commit."""
        now_ms = self._now_ms()
        for index, step in enumerate(self._steps):
            if step is not None:
                continue
            token = uuid.uuid4().hex
            deaths = self._suspects.deaths(index)
            running = self._running.pop(index, None)
            if running is None:
                self._settle(index, Parked(token, now_ms, deaths))
                continue
            task, answered, _, started_ms = running
            task.remove_done_callback(answered)
            self._in_flight.discard(task)
            deadline_s = self._work[index].deadline_s or self._settings.deadline_s
            not_before_ms = parked_not_before_ms(started_ms, deadline_s, safety_grace_s(deadline_s))
            self._parked.append(ParkedCall(self._work[index], token, task))
            self._stats.parked()
            self._settle(index, Parked(token, not_before_ms, deaths))
        self._due.clear()

    async def _send(self, index: int) -> tuple[Outcome, float]:
        delivery = self._work[index].delivery
        deadline_s = self._work[index].deadline_s or self._settings.deadline_s
        started = time.monotonic()
        # The transport keeps the deadline itself; this is the net for one that does not.
        # The lease goes back in the task's done-callback (``_start_send``), not here: given back
        # here, it would wake this window before the answer is queued, and the window would run
        # twice for every call that ends.
        try:
            async with asyncio.timeout(deadline_s + safety_grace_s(deadline_s)) as net:
                outcome = await self._transport.send(delivery, deadline_s)
        except TimeoutError:
            if not net.expired():
                raise
            outcome = outcome_from_timeout(deadline_s)
        # Here, so that a parked call's answer is screened like the others.
        outcome = screen_outputs(outcome, self._settings.outputs)
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
        self._breaker.record(outcome.kind, down=not_there(outcome))
        self._keep_limit(
            adaptive.update(
                self._limit, outcome.kind, latency_s, time.monotonic(), self._settings.adaptive
            )
        )
        self._stats.answered(outcome.kind, latency_s)
        self._last_answer_at = time.monotonic()
        served = outcome.kind is not OutcomeKind.BACKOFF and not outcome.no_answer
        if served:
            self._park_timer.observe(latency_s)
            self._breaker.mark_up()
        now_ms = self._now_ms()
        recovering = False
        if outcome.lost:
            conviction, alone = self._died(index)
            if alone and conviction is None:
                # The consumer died on it alone: it is down. The breaker opens and probes; this
                # suspect goes again only ``recovery_s`` after the consumer is back, so that the
                # consumer serves the others between two of its deaths (else the main line would
                # see one long outage).
                self._breaker.trip()
                self._wait_for_breaker()  # probes until it is back, even with nothing else due
                self._recovering.add(index)
                recovering = True
            if conviction is not None:
                dead = conviction.dead_letter(outcome.reason)
                log.warning("%s dead-lettered: %s", delivery.id, dead.reason)
                self._backoffs.pop(index, None)
                self._settle(index, dead)
                return
        elif index in self._suspects and outcome.kind is OutcomeKind.BACKOFF:
            self._suspects.refused(index)
            self._trace_suspect("refused", index, reason=repr(outcome.reason[:120]))
        else:
            if index in self._suspects:
                self._trace_suspect("cleared", index, answer=outcome.kind.name)
            self._suspects.answered(index)
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
        match step:
            case Stop(reason=reason):
                raise EndpointGoneError(f"{delivery.id}: {reason}")
            case Backoff(delay_s=delay_s, reason=reason):
                # Redeliver in place: the attempt is not spent, only time.
                self._backoffs[index] = consecutive
                if index in self._suspects:
                    # The breaker waits out the restart; a suspect's own pause must not compound
                    # over its deaths and refusals, or each round of isolation grows longer.
                    delay_s = self._settings.suspect_spread_s * self._rand()
                self._log_holdout(index, consecutive, reason, now_ms)
                due_ms = now_ms + math.ceil(delay_s * 1000)
                self._schedule(index, _UNTIL_BACK_MS if recovering else due_ms)
            case Done() | ToLane() | ToDlq():
                self._backoffs.pop(index, None)
                if not (isinstance(step, ToLane) and self._retry_here(index, step, now_ms)):
                    self._settle(index, step)
            case _:  # a new step must say here whether it settles the record
                assert_never(step)

    def _died(self, index: int) -> tuple[Conviction | None, bool]:
        """The consumer went away with ``index`` out: (its conviction, if this settles it;
        whether no other suspect was out with it)."""
        deaths, lone = self._suspects.deaths(index), self._suspects.lone(index)
        conviction = self._suspects.died(index, self._breaker.served)
        lone_now = conviction.lone if conviction is not None else self._suspects.lone(index)
        self._trace(
            "died",
            self._work[index].delivery.id,
            deaths=f"{deaths}->{deaths + 1}",
            lone=f"{lone}->{lone_now}",
            convicted=conviction is not None,
            served=self._breaker.served,
        )
        return conviction, lone_now > lone

    def _retry_here(self, index: int, step: ToLane, now_ms: int) -> bool:
        """Key mode: keep a retried record in the batch, due at its lane's time, its key's line
        waiting for it (docs/dispatch.md, "A retry that falls due inside its batch")."""
        if index in self._suspects:
            return False
        retried = retry_in_batch(self._work[index], step, self._settings, now_ms)
        if retried is None:
            return False
        self._waiters[index] = (self._work[index], step)
        self._work[index] = retried
        self._stats.retried_in_batch()
        self._schedule(index, retried.not_before_ms)
        return True

    def _maybe_give_up(self) -> None:
        """Once nothing else keeps the batch running, the retries still waiting leave it, but
        those due soon when most of what is left waits for them (``wait_until``): each that
        leaves takes the step it was answered (its record goes to the hold topic), and the
        records of its key behind it are held."""
        others_out = bool(self._in_flight or self._answers or self._suspects)
        if not self._waiters or others_out:
            return  # checked first: listing what is due costs the whole batch on every round
        due = [(due_ms, index) for due_ms, _, index in self._due]
        now_ms = self._now_ms()
        if not only_waiting(due, self._waiters, others_out=others_out, now_ms=now_ms):
            return
        if self._wait_until_ms is None:
            self._wait_until_ms = wait_until(
                now_ms, waiting_lines=len(self._waiters), free_lines=self._lines.free_lines()
            )
        left = leaving(due, self._waiters, self._wait_until_ms)
        if not left:
            return
        self._due = [entry for entry in self._due if entry[2] not in left]
        heapq.heapify(self._due)
        for index in sorted(left):
            work, step = self._waiters.pop(index)
            self._work[index] = work
            self._stats.left_batch()
            self._settle(index, step)

    def _singled_out(self, index: int, outcome: Outcome, now_ms: int) -> Outcome:
        """A message that has been told "back off" for longer than a deadline while the endpoint
        showed it was up (it answered other messages, or a breaker probe) is not a sign of an
        endpoint that is down: it moves to a retry lane, or it would hold its batch, and the
        partition, forever. With no sign of life meanwhile (an outage), it keeps waiting behind
        the breaker."""
        if outcome.kind is not OutcomeKind.BACKOFF:
            self._backoff_since.pop(index, None)
            return outcome
        since_ms, ups = self._backoff_since.setdefault(index, (now_ms, self._breaker.ups))
        waited_s = (now_ms - since_ms) / 1000
        if waited_s <= self._settings.deadline_s or self._breaker.ups <= ups:
            return outcome
        self._backoff_since.pop(index, None)
        self._stats.held_out(self._work[index].delivery.id, outcome.reason)
        return Outcome(
            OutcomeKind.RETRY,
            f"told to back off for {waited_s:.0f}s while the endpoint was up: {outcome.reason}",
        )

    def _log_holdout(self, index: int, consecutive: int, reason: str, now_ms: int) -> None:
        """Nothing loops in silence: a message turned away again and again while the rest of its
        slice is done is logged at each step."""
        if consecutive < 2 or index in self._suspects:
            return
        if self._unsettled != len(self._backoffs) or len(self._backoffs) > HOLDOUT_LOG_MAX:
            return
        since_ms, _ = self._backoff_since.get(index, (now_ms, 0))
        log.warning(
            "%s turned away %d times in %.1fs (%s); it moves to its next lane once it has waited"
            " %gs while the endpoint is up",
            self._work[index].delivery.id,
            consecutive,
            (now_ms - since_ms) / 1000,
            reason,
            self._settings.deadline_s,
        )

    def _settle(self, index: int, step: FinalStep | Resent) -> None:
        self._steps[index] = step
        self._unsettled -= 1
        delivery = self._work[index].delivery
        blocker = None
        if isinstance(step, ToLane):
            blocker = Blocker(delivery.id, step.lane, step.not_before_ms)
        elif isinstance(step, Resent):
            blocker = Blocker(delivery.id, delivery.lane, step.not_before_ms)
        self._release(self._lines.settle(index, blocker))

    def _release(self, released: Released) -> None:
        now_ms = self._now_ms()
        for index in released.send:
            work = self._work[index]
            early = read_before_due(work, self._settings, now_ms)
            if early is not None:
                self._waiters[index] = (work, early)
            self._schedule(index, work.not_before_ms)
        for index, blocker in released.follow:
            early = read_before_due(self._work[index], self._settings, now_ms)
            # A retried record read back before its time keeps its time if it must wait.
            self._steps[index] = follow(blocker) if early is None else early
            self._unsettled -= 1
            if early is None:
                self._stats.followed()

    def _schedule(self, index: int, due_ms: int) -> None:
        if index in self._suspects:
            self._suspects.wait(index, due_ms)
            return
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
        if transition.after is BreakerState.CLOSED and self._recovering:
            # The consumer is back: the suspects that killed it go again after a while.
            now_ms = self._now_ms()
            due_ms = now_ms + round(self._settings.recovery_s * 1000)
            for index in self._recovering:
                spread_ms = self._settings.suspect_spread_s * 1000 * self._rand()
                self._suspects.wait(index, due_ms + round(spread_ms))
                self._trace_suspect("back", index, due_in_ms=due_ms + round(spread_ms) - now_ms)
            self._recovering.clear()
        self._wake.set()

    def _trace_suspect(self, event: str, index: int, **fields: object) -> None:
        self._trace(
            event,
            self._work[index].delivery.id,
            deaths=self._suspects.deaths(index),
            lone=self._suspects.lone(index),
            **fields,
        )

    async def _sleep(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def _cancel_all(self, watches: list[asyncio.Task[Literal[True]]]) -> None:
        tasks: list[asyncio.Task[object]] = [*self._in_flight, *watches]
        if self._breaker_wait is not None:
            tasks.append(self._breaker_wait)
            self._stats.waited_on_breaker(time.monotonic() - self._breaker_wait_since)
            self._breaker_wait = None
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
        self._stats.suspects(
            self._suspects.suspected, self._suspects.isolations, self._suspects.convicted
        )
        return DispatchReport(
            tuple(settled), self._stats.snapshot(self._limit.current), tuple(self._parked)
        )


_Callback = Callable[[asyncio.Task[tuple[Outcome, float]]], None]


class _Lease:
    """A budget's lease, or none (no budget)."""

    __slots__ = ("_lease",)

    def __init__(self, lease: Lease | None) -> None:
        self._lease = lease

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()


_NO_LEASE = _Lease(None)
# The due time of a suspect waiting for the consumer to be back: set again when it is.
_UNTIL_BACK_MS = 2**62


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
