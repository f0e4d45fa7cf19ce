"""Worker side: follow the registry topic, so every executor knows each route's live instances
(docs/registration.md, "How the workers learn"). One feed per worker process and topic."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from siding.config import Endpoint
from siding.registry.records import Registration, RegistryState
from siding.transport.pool import Member

log = logging.getLogger(__name__)

# How often a worker reads what changed: a join reaches the workers within about this long.
REFRESH_S = 0.5
Records = Sequence[tuple[bytes, bytes | None]]
Listener = Callable[[set[str]], None]


def members_of(regs: Sequence[Registration]) -> tuple[Member, ...]:
    """Pure: the pool members of a route's registrations (an address that no longer parses is
    left out rather than failing every send)."""
    out = []
    for reg in regs:
        try:
            endpoint = Endpoint.parse(reg.address)
        except ValueError:
            continue
        out.append(Member(reg.id, endpoint, reg.capacity))
    return tuple(out)


class MemberFeed:
    """Reads new registry records every ``interval_s`` on a daemon thread (``open_reader`` is
    called there, so the Kafka client lives on that thread alone)."""

    def __init__(
        self, open_reader: Callable[[], Callable[[], Records]], interval_s: float = REFRESH_S
    ) -> None:
        self._open_reader = open_reader
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._state = RegistryState()
        self._members: dict[str, tuple[Member, ...]] = {}
        self._versions: dict[str, int] = {}
        self._listeners: list[Listener] = []
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="siding-member-feed", daemon=True)
        self._thread.start()

    def members(self, route: str) -> tuple[int, tuple[Member, ...]]:
        with self._lock:
            return self._versions.get(route, 0), self._members.get(route, ())

    def wait_ready(self, timeout_s: float) -> bool:
        """Until the first read is done (a task's first dispatch must know the instances)."""
        return self._ready.wait(timeout_s)

    def subscribe(self, listener: Listener) -> None:
        """``listener(routes)`` runs on the feed's thread after the members of ``routes``
        changed."""
        with self._lock:
            self._listeners.append(listener)

    def apply(self, records: Records) -> set[str]:
        """Fold ``records`` in; the routes whose members changed."""
        if not records:
            return set()
        with self._lock:
            self._state.apply_all(records)
            changed = set()
            for route in {*self._members, *self._state.consumers}:
                members = members_of(self._state.of_route(route))
                if members != self._members.get(route, ()):
                    self._members[route] = members
                    self._versions[route] = self._versions.get(route, 0) + 1
                    changed.add(route)
            listeners = list(self._listeners)
        for listener in listeners:
            if changed:
                listener(changed)
        return changed

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        read: Callable[[], Records] | None = None
        warned = 0.0
        while not self._stop.is_set():
            try:
                if read is None:
                    read = self._open_reader()
                self.apply(read())
                self._ready.set()
            except Exception as exc:  # Kafka away: keep what we know, try again
                if time.monotonic() - warned > 60:
                    log.warning("registry: cannot read the consumer registrations: %s", exc)
                    warned = time.monotonic()
            self._stop.wait(self._interval_s)
