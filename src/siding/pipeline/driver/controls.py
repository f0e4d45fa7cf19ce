"""Runtime control of routes on the driver: pause and resume, close the breaker, and change
``max_in_flight`` / ``rate_limit`` within the configured bounds (docs/operations.md).

Thread-safe: the control API's threads change it, the routes' batch handlers read it.

- **Pause** holds each of the route's queries at the start of its next batch: the batch running
  now finishes (its calls, its commit); nothing new is read until resume. Offsets stay correct
  because a held batch has not started: Spark commits nothing for it.
- **Close the breaker**: breakers live in the executors' workers, so the driver bumps an epoch
  that travels with every task's plan; a worker that sees a new epoch closes its breakers.
- **Changes** apply from the next batch. ``max_in_flight`` may go from the adaptive floor up to
  the configured value; ``rate_limit`` from 1 up to the configured limit (any, when the config has
  none), or 0 for none when the config has none.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from siding.config import RouteConfig
from siding.errors import SidingError


class RouteStopped(SidingError):
    """A batch of a route being deleted ends here, before it started: nothing is committed."""


class ControlError(SidingError):
    """A control call that cannot be done: ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _State:
    route: RouteConfig
    running: threading.Event = field(default_factory=threading.Event)
    breaker_epoch: int = 0
    max_in_flight: int | None = None
    rate_limit: float | None = None
    held: int = 0
    removed: bool = False

    def __post_init__(self) -> None:
        self.running.set()


class RouteControls:
    def __init__(
        self, routes: Mapping[str, RouteConfig] | None = None, registry_topic: str = ""
    ) -> None:
        self._lock = threading.Lock()
        self._states = {name: _State(route) for name, route in (routes or {}).items()}
        # Where consumer instances join routes (docs/registration.md); every task is told.
        self.registry_topic = registry_topic
        self._removed: set[str] = set()

    def add(self, route: RouteConfig) -> None:
        """Control a route created at runtime."""
        with self._lock:
            self._states[route.name] = _State(route)
            self._removed.discard(route.name)

    def remove(self, name: str) -> None:
        """The route is being deleted: a batch of it held by a pause, and any batch of it that
        starts from now on, ends with ``RouteStopped`` (not started, so never committed)."""
        with self._lock:
            state = self._states.pop(name, None)
            self._removed.add(name)
        if state is not None:
            state.removed = True
            state.running.set()

    def held(self, name: str) -> int:
        """How many of the route's batch handlers are held by a pause right now."""
        state = self._states.get(name)
        return state.held if state is not None else 0

    def _state(self, name: str) -> _State:
        state = self._states.get(name)
        if state is None:
            raise ControlError(404, f"no route named {name!r}")
        return state

    def pause(self, name: str) -> None:
        self._state(name).running.clear()

    def resume(self, name: str) -> None:
        self._state(name).running.set()

    def paused(self, name: str) -> bool:
        state = self._states.get(name)
        return state is not None and not state.running.is_set()

    def close_breaker(self, name: str) -> int:
        """The new epoch: every worker closes this route's breakers at its next task."""
        with self._lock:
            state = self._state(name)
            state.breaker_epoch += 1
            return state.breaker_epoch

    def breaker_epoch(self, name: str) -> int:
        state = self._states.get(name)
        return state.breaker_epoch if state is not None else 0

    def change(self, name: str, changes: Mapping[str, object]) -> dict[str, object]:
        """Apply ``max_in_flight`` and/or ``rate_limit``; returns the route's values now."""
        unknown = set(changes) - {"max_in_flight", "rate_limit"}
        if unknown:
            raise ControlError(400, f"cannot change {', '.join(sorted(unknown))}")
        with self._lock:
            state = self._state(name)
            limit = changes.get("max_in_flight")
            rate = changes.get("rate_limit")
            new_limit = _in_flight(state.route, limit) if limit is not None else None
            new_rate = _rate(state.route, rate) if rate is not None else None
            if new_limit is not None:
                state.max_in_flight = new_limit
            if new_rate is not None:
                state.rate_limit = new_rate
            return self._values(state)

    def values(self, name: str) -> dict[str, object]:
        """The route's control values now; empty for a route this does not control."""
        with self._lock:
            state = self._states.get(name)
            return self._values(state) if state is not None else {}

    def _values(self, state: _State) -> dict[str, object]:
        route = self.effective(state.route)
        return {
            "paused": not state.running.is_set(),
            "max_in_flight": route.max_in_flight,
            "rate_limit": route.rate_limit,
            "breaker_epoch": state.breaker_epoch,
        }

    def effective(self, route: RouteConfig) -> RouteConfig:
        """``route`` with the changes made at runtime."""
        state = self._states.get(route.name)
        if state is None:
            return route
        update: dict[str, object] = {}
        if state.max_in_flight is not None:
            update["max_in_flight"] = state.max_in_flight
        if state.rate_limit is not None:
            update["rate_limit"] = state.rate_limit
        return route.model_copy(update=update) if update else route

    def wait_while_paused(self, name: str, stop: threading.Event, poll_s: float = 0.2) -> None:
        """Hold the calling batch handler while ``name`` is paused (or until ``stop``)."""
        state = self._states.get(name)
        if state is None:
            if name in self._removed:
                raise RouteStopped(f"route {name} was deleted: this batch was not started")
            return
        if state.running.is_set():
            return
        with self._lock:
            state.held += 1
        try:
            while not state.running.wait(poll_s):
                if stop.is_set():
                    return
        finally:
            with self._lock:
                state.held -= 1
        if state.removed:
            raise RouteStopped(f"route {name} was deleted: this batch was not started")


def _in_flight(route: RouteConfig, value: object) -> int:
    low, high = min(route.adaptive.min_in_flight, route.max_in_flight), route.max_in_flight
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ControlError(400, f"max_in_flight must be a whole number from {low} to {high}")
    return value


def _rate(route: RouteConfig, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ControlError(400, "rate_limit must be a number")
    rate = float(value)
    configured = route.rate_limit
    if configured > 0 and not 1 <= rate <= configured:
        raise ControlError(400, f"rate_limit must be from 1 to {configured:g} (the configured)")
    if configured == 0 and rate < 0:
        raise ControlError(400, "rate_limit must be 0 (no limit) or more")
    return rate
