"""The budget of a route and endpoint shared by every Python worker of one machine (executor side).

Spark runs each task in a Python worker process, and parked calls live on in the worker that
started them, so a budget kept in one process would count only its own calls. The budget is a
file instead (docs/dispatch.md, "One budget per route and endpoint"):

- each in-flight slot is one byte of the file, held with a POSIX record lock (``lockf``) for as
  long as the call runs: the kernel is the counter, and a worker that dies gives its slots back
  with its locks;
- the rate limit (a token bucket and the start times of the last second's sends) sits in the
  file's head, read and written under a lock of its first byte;
- a counter of slots given back lets a window with no slot look again only when one was.

Everything here runs on the worker's event-loop thread. A process must keep one descriptor per
file: closing any descriptor of a file drops all the process's locks on it.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import math
import mmap
import os
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from siding.dispatch.budget import Lease, budget_burst, rate_wait_s, refill, ring_size

# SIDING_BUDGET_DIR: where budget files live (one per route, endpoint and scope); every Python
# worker of a machine must see the same directory, which the system's temporary one is.
DIR_ENV = "SIDING_BUDGET_DIR"
# Head: tokens, their time, next ring entry, ring size; then slots given back (a hint, unlocked).
_HEAD = struct.Struct("<ddqq")
_GIVEN_AT = 32
_RING_AT = 64
_SLOTS_AT = 1 << 20  # a slot's byte: past the ring of at most RING_MAX send times
# A window with no slot looks again after this long, or at once when its own process gives one
# back; it scans every slot only when some process gave one back, or every FULL_SCAN_S.
POLL_S = 0.01
FULL_SCAN_S = 0.1


def budget_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or Path(tempfile.gettempdir()) / "siding-budget")


def budget_path(directory: Path, route: str, endpoint: str, scope: str) -> Path:
    digest = hashlib.sha256(f"{scope}\0{route}\0{endpoint}".encode()).hexdigest()[:32]
    return directory / f"{digest}.budget"


@dataclass
class _Slot:
    budget: SharedBudget
    index: int
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.budget._give_back(self.index)


class SharedBudget:
    """``limit`` calls at once and ``rate`` sends per second (0: none) for everything that sends
    through the same file; ``limit`` and ``rate`` follow the route's controls (``configure``)."""

    def __init__(self, path: Path, limit: int, rate: float = 0.0, burst: float | None = None):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < _SLOTS_AT:
            os.ftruncate(self._fd, _SLOTS_AT)  # sparse; two workers growing it agree
        self._map = mmap.mmap(self._fd, _SLOTS_AT)
        self.limit, self.rate, self.burst = limit, rate, burst
        self._held: set[int] = set()
        self._cursor = 0
        self._wakes: set[asyncio.Event] = set()
        self._scanned_at = -math.inf
        self._scanned_given = -1

    def configure(self, limit: int, rate: float, burst: float | None) -> None:
        self.limit, self.rate, self.burst = limit, rate, burst

    @property
    def held(self) -> int:
        """Slots this process holds now."""
        return len(self._held)

    def take(self) -> Lease | float:
        if len(self._held) >= self.limit:
            return math.inf  # only this process's own calls hold slots: one ending wakes it
        now = time.monotonic()
        given = self._given()
        if given == self._scanned_given and now - self._scanned_at < FULL_SCAN_S:
            return POLL_S  # nothing was given back since the last scan found no slot
        index = self._lock_free_slot()
        if index is None:
            self._scanned_given, self._scanned_at = given, now
            return POLL_S
        if self.rate:
            wait_s = self._take_token()
            if wait_s > 0:
                self._unlock(index)
                return wait_s
        self._held.add(index)
        return _Slot(self, index)

    def watch(self, wake: asyncio.Event) -> Callable[[], None]:
        self._wakes.add(wake)
        return lambda: self._wakes.discard(wake)

    def _lock_free_slot(self) -> int | None:
        limit = self.limit
        for step in range(limit):
            index = (self._cursor + step) % limit
            if index in self._held:
                continue  # a process's own lock never conflicts with itself
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SLOTS_AT + index)
            except OSError:
                continue
            self._cursor = index + 1
            return index
        return None

    def _unlock(self, index: int) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, _SLOTS_AT + index)

    def _give_back(self, index: int) -> None:
        self._held.discard(index)
        self._unlock(index)
        # A hint for the other processes, written without a lock: a lost increment only makes
        # them wait for their next full scan.
        struct.pack_into("<q", self._map, _GIVEN_AT, self._given() + 1)
        self._cursor = index
        for wake in self._wakes:
            wake.set()

    def _given(self) -> int:
        return int(struct.unpack_from("<q", self._map, _GIVEN_AT)[0])

    def _take_token(self) -> float:
        """Under the head's lock: take a rate token, or say how long until one."""
        rate = self.rate
        burst = budget_burst(rate) if self.burst is None else self.burst
        size = ring_size(rate)
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, 0)
        try:
            now = time.monotonic()  # read under the lock: the ring's times only grow
            tokens, at, head, stored = _HEAD.unpack_from(self._map, 0)
            if stored != size:  # a new file, or the rate changed: start afresh
                tokens, at, head = burst, now, 0
                self._map[_RING_AT : _RING_AT + 8 * size] = bytes(8 * size)
            tokens = refill(tokens, at, now, rate, burst)
            at = max(at, now)
            oldest = struct.unpack_from("<d", self._map, _RING_AT + 8 * head)[0]
            wait_s = rate_wait_s(tokens, oldest or -math.inf, now, rate)
            if wait_s <= 0:
                tokens -= 1
                struct.pack_into("<d", self._map, _RING_AT + 8 * head, now)
                head = (head + 1) % size
            _HEAD.pack_into(self._map, 0, tokens, at, head, size)
            return wait_s
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)


_budgets: dict[Path, SharedBudget] = {}


def shared_budget(path: Path, limit: int, rate: float, burst: float | None = None) -> SharedBudget:
    """This process's one handle on ``path``, set to the limits of the batch asking."""
    budget = _budgets.get(path)
    if budget is None:
        budget = _budgets[path] = SharedBudget(path, limit, rate, burst)
    else:
        budget.configure(limit, rate, burst)
    return budget
