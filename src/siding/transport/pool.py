"""One transport over a route's consumer instances as they join and leave (docs/registration.md).

The dispatcher sees one endpoint: each ``send`` goes to the live instance with the least
outstanding work for its capacity, and waits (up to half its deadline) while there is none.
An instance that cannot be reached, or that breaks a call, is set aside for a while (and tried
again later); a delivery it never received goes to another instance at once. One it took with
it goes to another instance once, without an attempt being spent; a second death of the same
delivery is answered as the transports answer any death (``lost``), so the dispatcher's suspect
rules still find a message that kills every instance (docs/dispatch.md, "Suspects"). An
instance that has left (or whose lease lapsed) takes nothing new; its calls run out, and one it
breaks is sent elsewhere with no suspicion at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from siding.config import Endpoint
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport.base import Transport
from siding.transport.outcomes import never_reached

# An instance that failed is not chosen for this long, doubled per failure in a row.
DOWN_MIN_S = 1.0
DOWN_MAX_S = 15.0
# How many delivery ids a pool remembers as already sent elsewhere once after a death.
REMEMBERED_DEATHS = 10_000


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    endpoint: Endpoint
    capacity: int


Members = Callable[[], tuple[int, Sequence[Member]]]
"""The instances now, with a version that changes whenever they change."""


@dataclass(frozen=True, slots=True)
class Load:
    outstanding: int
    capacity: int
    available: bool = True


def pick(loads: Sequence[Load], start: int = 0) -> int | None:
    """Pure: the index of the available instance where one more delivery weighs least
    (``(outstanding + 1) / capacity``); ties go to the first from ``start`` on."""
    best, best_score = None, 0.0
    for k in range(len(loads)):
        i = (start + k) % len(loads)
        load = loads[i]
        if not load.available:
            continue
        score = (load.outstanding + 1) / max(1, load.capacity)
        if best is None or score < best_score:
            best, best_score = i, score
    return best


def down_for(failures: int) -> float:
    """Pure: how long an instance is set aside after ``failures`` failures in a row."""
    return float(min(DOWN_MAX_S, DOWN_MIN_S * 2 ** max(0, failures - 1)))


@dataclass(eq=False)
class _Slot:
    member: Member
    transport: Transport
    outstanding: int = 0
    failures: int = 0
    down_until: float = 0.0
    gone: bool = False


@dataclass
class PoolStats:
    """What the pool did, for tests and logs."""

    sent: dict[str, int] = field(default_factory=dict)
    moved: int = 0  # deliveries sent to another instance after one failed or died


class PoolTransport:
    """A ``Transport`` over ``members()``; ``make`` builds each instance's own transport."""

    def __init__(
        self,
        members: Members,
        make: Callable[[Endpoint], Transport],
        *,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._members = members
        self._make = make
        self._name = name
        self._clock = clock
        self._version: int | None = None
        self._slots: dict[str, _Slot] = {}
        self._turn = 0
        self._died: OrderedDict[str, None] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()  # set when instances come in (then replaced)
        self.stats = PoolStats()

    def refresh(self) -> int:
        """Follow ``members()``; returns how many instances came in. Call on the loop."""
        version, members = self._members()
        if version == self._version:
            return 0
        self._version = version
        wanted = {m.id: m for m in members}
        for member_id, slot in list(self._slots.items()):
            if member_id not in wanted or wanted[member_id].endpoint != slot.member.endpoint:
                self._retire(member_id, slot)
        added = 0
        for member in members:
            kept = self._slots.get(member.id)
            if kept is None:
                self._slots[member.id] = _Slot(member, self._make(member.endpoint))
                added += 1
            else:
                kept.member = member  # its capacity may have changed
        if added:
            self._changed.set()
            self._changed = asyncio.Event()
        return added

    def _retire(self, member_id: str, slot: _Slot) -> None:
        """No new sends; its calls run out, then its transport is closed."""
        slot.gone = True
        del self._slots[member_id]
        if slot.outstanding == 0:
            self._close_later(slot)

    def _close_later(self, slot: _Slot) -> None:
        task = asyncio.get_running_loop().create_task(slot.transport.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @property
    def members(self) -> list[Member]:
        return [slot.member for slot in self._slots.values()]

    def outstanding(self) -> dict[str, int]:
        return {member_id: slot.outstanding for member_id, slot in self._slots.items()}

    def _choose(self, tried: set[str]) -> _Slot | None:
        now = self._clock()
        slots = list(self._slots.values())
        loads = [
            Load(s.outstanding, s.member.capacity, s.down_until <= now and s.member.id not in tried)
            for s in slots
        ]
        self._turn += 1
        index = pick(loads, self._turn % len(slots) if slots else 0)
        return None if index is None else slots[index]

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        self.refresh()
        started = self._clock()
        # With no instance to take it, a send waits for one (one joins, or one set aside may
        # be tried again) for at most half its deadline: the other half is for the call.
        wait_until = started + deadline_s / 2
        tried: set[str] = set()
        last: Outcome | None = None
        while True:
            slot = self._choose(tried)
            if slot is None:
                if await self._wait_for_one(wait_until):
                    tried.clear()
                    continue
                return last or self._nobody()
            tried.add(slot.member.id)
            if last is not None:
                self.stats.moved += 1
            remaining = deadline_s - (self._clock() - started)
            outcome = await self._send_to(slot, delivery, remaining)
            if never_reached(outcome):
                self._failed(slot)
                last = outcome
                continue
            if outcome.lost:
                self._failed(slot)
                if slot.gone:
                    # It left: down, not poison. Another instance takes it, unsuspected.
                    last = Outcome(
                        OutcomeKind.BACKOFF,
                        f"instance {slot.member.id} left with the delivery: {outcome.reason}",
                    )
                    continue
                left_s = deadline_s - (self._clock() - started)
                if delivery.id not in self._died and left_s >= deadline_s / 2:
                    self._remember_death(delivery.id)
                    last = outcome
                    continue
                return outcome
            slot.failures = 0
            return outcome

    async def _send_to(self, slot: _Slot, delivery: Delivery, deadline_s: float) -> Outcome:
        slot.outstanding += 1
        member_id = slot.member.id
        self.stats.sent[member_id] = self.stats.sent.get(member_id, 0) + 1
        try:
            return await slot.transport.send(delivery, deadline_s)
        finally:
            slot.outstanding -= 1
            if slot.gone and slot.outstanding == 0:
                self._close_later(slot)

    async def _wait_for_one(self, until: float) -> bool:
        """Wait until an instance comes in or one set aside may be tried again, at most until
        ``until``; whether there is time left to send."""
        now = self._clock()
        later = [s.down_until for s in self._slots.values() if s.down_until > now]
        wake = min([*later, until])
        if wake <= now:
            return False
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wake - now):
                await changed.wait()
        self.refresh()
        return self._clock() < until

    def _failed(self, slot: _Slot) -> None:
        slot.failures += 1
        slot.down_until = self._clock() + down_for(slot.failures)

    def _remember_death(self, delivery_id: str) -> None:
        self._died[delivery_id] = None
        while len(self._died) > REMEMBERED_DEATHS:
            self._died.popitem(last=False)

    def _nobody(self) -> Outcome:
        what = f"route {self._name}" if self._name else "the route"
        if self._slots:
            return Outcome(OutcomeKind.BACKOFF, f"every instance of {what} is down")
        return Outcome(OutcomeKind.BACKOFF, f"no consumer instance has joined {what}")

    async def probe(self) -> bool:
        """Whether any instance answers its health check (it is then chosen again at once)."""
        self.refresh()
        slots = list(self._slots.values())
        if not slots:
            return False
        probes = (s.transport.probe() for s in slots)
        answers = await asyncio.gather(*probes, return_exceptions=True)
        up = False
        for slot, answer in zip(slots, answers, strict=True):
            if answer is True:
                slot.failures, slot.down_until, up = 0, 0.0, True
        return up

    async def close(self) -> None:
        slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            await slot.transport.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
