"""An in-memory Transport whose answers come from a script, for fast tests of the layers above."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from siding.model import ACK, Delivery, Outcome
from siding.transport.outcomes import lost, outcome_from_connection_error, outcome_from_timeout

Answer = Callable[[Delivery, int], Outcome]
"""(delivery, how many times this delivery id was sent before) -> the outcome to return."""

Script = Mapping[str, Outcome | Sequence[Outcome]] | Answer
Latency = float | Callable[[Delivery], float]


@dataclass(frozen=True, slots=True)
class SendRecord:
    """One finished ``send``: what, when it started and ended (``clock`` seconds), what came back,
    and how many sends were in flight when it started (itself included)."""

    delivery: Delivery
    started_at: float
    ended_at: float
    outcome: Outcome
    concurrent: int


class ScriptedTransport:
    """Answers per delivery id from ``script`` (ACK when the id is not in it).

    A mapping value that is a sequence gives the answer of the 1st, 2nd, ... send of that id; the
    last one repeats. Each send takes ``latency_s``; one longer than the deadline returns
    ``outcome_from_timeout`` at the deadline, unless ``honour_deadline`` is off (a hung endpoint).
    While ``down``, sends return BACKOFF at once and ``probe`` answers False.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        latency_s: Latency = 0.0,
        honour_deadline: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._script: Script = script or {}
        self._latency = latency_s
        self._honour_deadline = honour_deadline
        self._clock = clock
        self._seen: Counter[str] = Counter()
        self.down = False
        self.closed = False
        self.started: list[Delivery] = []
        self.sends: list[SendRecord] = []
        self.probes = 0
        self.in_flight = 0
        self.max_concurrent = 0

    def set_down(self, down: bool) -> None:
        self.down = down

    def sent_ids(self) -> list[str]:
        """Delivery ids in the order their sends started."""
        return [d.id for d in self.started]

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        started = self._clock()
        self.started.append(delivery)
        self.in_flight += 1
        concurrent = self.in_flight
        self.max_concurrent = max(self.max_concurrent, concurrent)
        try:
            outcome = await self._answer(delivery, deadline_s)
        finally:
            self.in_flight -= 1
        self.sends.append(SendRecord(delivery, started, self._clock(), outcome, concurrent))
        return outcome

    async def probe(self) -> bool:
        self.probes += 1
        return not self.down

    async def close(self) -> None:
        self.closed = True

    async def _answer(self, delivery: Delivery, deadline_s: float) -> Outcome:
        if self.down:
            return outcome_from_connection_error(ConnectionRefusedError("scripted: endpoint down"))
        nth = self._seen[delivery.id]
        self._seen[delivery.id] += 1
        latency = self._latency(delivery) if callable(self._latency) else self._latency
        if self._honour_deadline and latency > deadline_s:
            await asyncio.sleep(deadline_s)
            return outcome_from_timeout(deadline_s)
        if latency > 0:
            await asyncio.sleep(latency)
        return self._lookup(delivery, nth)

    def _lookup(self, delivery: Delivery, nth: int) -> Outcome:
        if callable(self._script):
            return self._script(delivery, nth)
        answers = self._script.get(delivery.id, ACK)
        if isinstance(answers, Outcome):
            return answers
        return answers[min(nth, len(answers) - 1)] if answers else ACK


class CrashingTransport:
    """A consumer process that dies on some messages, under a supervisor that restarts it.

    Receiving a delivery for which ``kills`` is true kills it: every call out at that moment
    (that one included) ends with a ``lost`` outcome, and for ``restart_s`` it refuses
    connections (BACKOFF, ``probe`` false). Everything else is ACKed after ``latency_s``.
    ``received`` counts deliveries per id, ``deaths`` the deaths.
    """

    def __init__(
        self,
        kills: Callable[[Delivery], bool],
        *,
        latency_s: float = 0.005,
        restart_s: float = 0.05,
    ) -> None:
        self._kills = kills
        self._latency_s = latency_s
        self._restart_s = restart_s
        self._out: set[asyncio.Future[Outcome]] = set()
        self._down_until = 0.0
        self.deaths = 0
        self.received: Counter[str] = Counter()
        self.log: list[tuple[float, str]] = []  # (monotonic time, delivery id) of each receipt
        self.max_out = 0

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        if time.monotonic() < self._down_until:
            return outcome_from_connection_error(ConnectionRefusedError("fake: restarting"))
        self.received[delivery.id] += 1
        self.log.append((time.monotonic(), delivery.id))
        call: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._out.add(call)
        self.max_out = max(self.max_out, len(self._out))
        if self._kills(delivery):
            self._die()
        try:
            return await asyncio.wait_for(call, min(self._latency_s, deadline_s))
        except TimeoutError:
            return ACK if self._latency_s <= deadline_s else outcome_from_timeout(deadline_s)
        finally:
            self._out.discard(call)

    def _die(self) -> None:
        self.deaths += 1
        self._down_until = time.monotonic() + self._restart_s
        for call in self._out:
            if not call.done():
                call.set_result(lost("fake: Socket closed"))
        self._out.clear()

    async def probe(self) -> bool:
        return time.monotonic() >= self._down_until

    async def close(self) -> None:
        self._out.clear()
