"""The circuit breaker of one endpoint: stop pushing while it is down, probe before resuming."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from siding.errors import ConfigError
from siding.model import OutcomeKind


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """``failure_threshold`` consecutive BACKOFF answers open the breaker for ``open_for_s``;
    each failed probe doubles that, up to ``max_open_for_s``. A death (the consumer died with
    calls out: a suspect sent alone died), or failures that say the consumer is not there (a
    call it went away with, a refused connection) rather than "slow down", open it for
    ``death_probe_s`` at most, and failed probes then keep that pace instead of doubling: a
    consumer that restarts is back in seconds, and a probe that met it down again (killed anew by
    a suspect another worker sent) says nothing about an overload."""

    failure_threshold: int = 5
    open_for_s: float = 1.0
    max_open_for_s: float = 60.0
    probe_timeout_s: float = 5.0
    death_probe_s: float = 1.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ConfigError("breaker.failure_threshold", "must be at least 1")
        if self.open_for_s <= 0:
            raise ConfigError("breaker.open_for_s", "must be positive")
        if self.max_open_for_s < self.open_for_s:
            raise ConfigError("breaker.max_open_for_s", "must be at least open_for_s")
        if self.probe_timeout_s <= 0:
            raise ConfigError("breaker.probe_timeout_s", "must be positive")
        if self.death_probe_s <= 0:
            raise ConfigError("breaker.death_probe_s", "must be positive")


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    """The breaker's whole state; ``open_until`` is on the breaker's monotonic clock;
    ``death``: opened by a death (probes keep a steady pace), not by an overload's BACKOFF
    answers; ``down``: while CLOSED, one of the ``failures`` counted said the consumer is not
    there (a lost call, a refused connection)."""

    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    open_for_s: float = 0.0
    open_until: float = 0.0
    death: bool = False
    down: bool = False


@dataclass(frozen=True, slots=True)
class Answered:
    """A send came back with this outcome kind; ``down``: a BACKOFF that says the consumer is
    not there (it went away with the call, or refused the connection), not that it is busy."""

    kind: OutcomeKind
    down: bool = False


@dataclass(frozen=True, slots=True)
class ForcedClose:
    """An operator closed the breaker (the control API): sends may go at once."""


@dataclass(frozen=True, slots=True)
class Tripped:
    """The endpoint is known to be down (the consumer died on a message sent to it alone)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed."""


@dataclass(frozen=True, slots=True)
class Probed:
    """The half-open probe came back."""

    ok: bool


BreakerEvent = Answered | Tick | Probed | Tripped | ForcedClose


def transition(
    status: BreakerStatus, event: BreakerEvent, now: float, settings: BreakerSettings
) -> BreakerStatus:
    """The breaker's state machine as a pure function (see ``CircuitBreaker``)."""
    if isinstance(event, ForcedClose):
        return BreakerStatus()
    if status.state is BreakerState.CLOSED:
        if isinstance(event, Tripped):
            return _open(min(settings.open_for_s, settings.death_probe_s), now, death=True)
        if not isinstance(event, Answered):
            return status
        if event.kind is not OutcomeKind.BACKOFF:
            return replace(status, failures=0, down=False) if status.failures else status
        failures = status.failures + 1
        down = status.down or event.down
        if failures < settings.failure_threshold:
            return replace(status, failures=failures, down=down)
        if down:
            # Not there, rather than overloaded (a crash pill sent by another worker killed it,
            # a restart): it is expected back in seconds, so the breaker probes at the death's
            # pace; a gRPC probe waits for the channel, so it sees the consumer once it listens.
            return _open(min(settings.open_for_s, settings.death_probe_s), now, death=True)
        return _open(settings.open_for_s, now)
    if status.state is BreakerState.OPEN:
        if isinstance(event, Tick) and now >= status.open_until:
            return replace(status, state=BreakerState.HALF_OPEN)
        # Late answers of sends started before the breaker opened decide nothing: the probe does.
        return status
    if isinstance(event, Probed):
        if event.ok:
            return BreakerStatus()
        if status.death:
            # A steady pace of probe starts: the next one a death's pace after this one began
            # (HALF_OPEN keeps ``open_until``, when it could begin), at once when this one took
            # longer. A gRPC probe waits for the channel up to its timeout (2 s): reopening for
            # the whole pace after that left the consumer unprobed for a second after it came
            # back (stop 36: the main lane's worker closed 1-2 s after the consumer's restart).
            until = max(now, status.open_until + status.open_for_s)
            return BreakerStatus(BreakerState.OPEN, 0, status.open_for_s, until, death=True)
        return _open(min(status.open_for_s * 2, settings.max_open_for_s), now)
    return status


def _open(open_for_s: float, now: float, *, death: bool = False) -> BreakerStatus:
    return BreakerStatus(BreakerState.OPEN, 0, open_for_s, now + open_for_s, death)


@dataclass(frozen=True, slots=True)
class BreakerTransition:
    at: float  # the breaker's (monotonic) clock
    before: BreakerState
    after: BreakerState
    # Epoch seconds, for people: the monotonic clock of an executor means nothing elsewhere.
    wall: float = field(default_factory=time.time, compare=False)
    # Into OPEN: for how long, and whether a death opened it (else BACKOFF answers or a probe).
    open_for_s: float = field(default=0.0, compare=False)
    death: bool = field(default=False, compare=False)


Listener = Callable[[BreakerTransition], None]


class CircuitBreaker:
    """One per endpoint, shared by every dispatch of the process (one event loop).

    State machine::

        CLOSED    --failure_threshold consecutive BACKOFF answers--> OPEN (open_for = open_for_s;
                  min(open_for_s, death_probe_s), not doubled, when one said "not there")
        CLOSED    --any other answer--> CLOSED (count reset)
        OPEN      --open_for elapsed--> HALF_OPEN
        HALF_OPEN --probe() true--> CLOSED
        HALF_OPEN --probe() false, raised or timed out--> OPEN (open_for doubled, capped)
        CLOSED    --trip() (a death)--> OPEN (open_for = min(open_for_s, death_probe_s));
                  its failed probes reopen it for the same time, not doubled, counted from
                  when the probe could begin (a probe that waited longer: probe again at once)

    Only CLOSED lets sends through. Answers that arrive while OPEN or HALF_OPEN (sends started
    before it opened) are ignored. One caller of ``wait_closed`` probes; the others wait for it.
    """

    def __init__(
        self,
        settings: BreakerSettings,
        probe: Callable[[], Awaitable[bool]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._probe = probe
        self._clock = clock
        self._status = BreakerStatus()
        self._probing = False
        self._changed: asyncio.Event | None = None
        self._changed_loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[Listener] = []
        # Grows each time the endpoint shows it is up (a real answer, a good probe): a message
        # refused again and again while this grows is singled out, not a sign of an outage.
        self.ups = 0
        # Grows with every real answer only: whether the consumer works for anyone (suspects).
        self.served = 0

    @property
    def settings(self) -> BreakerSettings:
        return self._settings

    @property
    def state(self) -> BreakerState:
        """The current state, for metrics and for the dispatcher's "may I send" check."""
        return self._apply(Tick()).state

    @property
    def status(self) -> BreakerStatus:
        return self._apply(Tick())

    def record(self, kind: OutcomeKind, *, down: bool = False) -> None:
        """Feed one send's outcome (``down``: it says the consumer is not there)."""
        self._apply(Answered(kind, down))

    def close(self) -> None:
        """Close now, whatever the state: an operator says the endpoint is back."""
        self._apply(ForcedClose())

    def trip(self) -> None:
        """Open now (when CLOSED): the endpoint is known to be down."""
        self._apply(Tripped())

    def mark_up(self) -> None:
        """The endpoint really answered a message."""
        self.ups += 1
        self.served += 1

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every state change; returns the function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def wait_closed(self) -> None:
        """Return once the breaker is CLOSED, probing the endpoint when it is this caller's turn."""
        while True:
            status = self._apply(Tick())
            if status.state is BreakerState.CLOSED:
                return
            if status.state is BreakerState.OPEN:
                await self._wait_change(max(0.0, status.open_until - self._clock()))
            elif self._probing:
                await self._wait_change(None)
            else:
                await self._run_probe()

    async def _run_probe(self) -> None:
        self._probing = True
        try:
            ok = await self._probe_once()
            self.ups += ok
            self._apply(Probed(ok))
        finally:
            self._probing = False
            self._notify()

    async def _probe_once(self) -> bool:
        try:
            async with asyncio.timeout(self._settings.probe_timeout_s):
                return await self._probe()
        except Exception:
            # A probe that breaks says the same as one that answers no.
            return False

    def _apply(self, event: BreakerEvent) -> BreakerStatus:
        now = self._clock()
        before = self._status
        after = transition(before, event, now, self._settings)
        self._status = after
        if after.state is not before.state:
            change = BreakerTransition(
                now, before.state, after.state, open_for_s=after.open_for_s, death=after.death
            )
            for listener in tuple(self._listeners):
                listener(change)
            self._notify()
        return after

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_change(self, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        if self._changed is None or self._changed_loop is not loop:
            self._changed = asyncio.Event()
            self._changed_loop = loop
        changed = self._changed
        try:
            async with asyncio.timeout(timeout):
                await changed.wait()
        except TimeoutError:
            pass
