"""Pure: what the registry topic holds, and the state it folds into (docs/registration.md).

One compacted topic (``[control] registry_topic``, one partition), two kinds of record:

    route/<name>              a route made through the control API: the table as given
    consumer/<route>/<id>     a consumer instance that joined a route: its address and lease
    driver/alive              when the driver last said it runs (leases do not run while it
                              is down: they are moved on by the time it was away)

A tombstone (null value) removes a route or a consumer. The driver writes them; the driver and
every worker process read them back in log order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from siding.config import RouteConfig, parse_route
from siding.routing.producer import OutRecord

ROUTE_PREFIX = "route/"
CONSUMER_PREFIX = "consumer/"
ALIVE_KEY = "driver/alive"


@dataclass(frozen=True, slots=True)
class Registration:
    """A consumer instance of ``route`` at ``address`` (an endpoint URL), held by a lease that
    ends at ``expires_ms`` unless renewed."""

    route: str
    id: str
    address: str
    capacity: int
    joined_ms: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """A route made through the control API: the keys of its ``[[route]]`` table, as given."""

    name: str
    table: Mapping[str, Any]
    created_ms: int


def route_record(topic: str, entry: RouteEntry) -> OutRecord:
    value = {"table": dict(entry.table), "created_ms": entry.created_ms}
    return OutRecord(topic, (ROUTE_PREFIX + entry.name).encode(), _json(value), ())


def route_tombstone(topic: str, name: str) -> OutRecord:
    return OutRecord(topic, (ROUTE_PREFIX + name).encode(), None, ())


def registration_record(topic: str, reg: Registration) -> OutRecord:
    value = {
        "address": reg.address,
        "capacity": reg.capacity,
        "joined_ms": reg.joined_ms,
        "expires_ms": reg.expires_ms,
    }
    return OutRecord(topic, _consumer_key(reg.route, reg.id), _json(value), ())


def registration_tombstone(topic: str, route: str, consumer_id: str) -> OutRecord:
    return OutRecord(topic, _consumer_key(route, consumer_id), None, ())


def alive_record(topic: str, at_ms: int) -> OutRecord:
    return OutRecord(topic, ALIVE_KEY.encode(), _json({"at_ms": at_ms}), ())


def paused(reg: Registration, away_ms: int) -> Registration:
    """The registration with its lease moved on by the time the driver was away."""
    return replace(reg, expires_ms=reg.expires_ms + max(0, away_ms))


def renewed(reg: Registration, now_ms: int, lease_s: float) -> Registration:
    """The registration with its lease running ``lease_s`` from ``now_ms``."""
    return replace(reg, expires_ms=now_ms + round(lease_s * 1000))


def lapsed(regs: Iterable[Registration], now_ms: int) -> list[Registration]:
    """The registrations whose lease ended before ``now_ms``."""
    return [reg for reg in regs if reg.expires_ms < now_ms]


@dataclass
class RegistryState:
    """The registry as the records so far say it is (not thread-safe: the owner locks)."""

    routes: dict[str, RouteEntry] = field(default_factory=dict)
    consumers: dict[str, dict[str, Registration]] = field(default_factory=dict)
    alive_ms: int = 0

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Fold one record in; a record of a kind this version does not know is skipped."""
        text = key.decode("utf-8", "replace")
        if text == ALIVE_KEY:
            self.alive_ms = int(json.loads(value)["at_ms"]) if value is not None else 0
        elif text.startswith(ROUTE_PREFIX):
            name = text.removeprefix(ROUTE_PREFIX)
            if value is None:
                self.routes.pop(name, None)
            else:
                data = json.loads(value)
                self.routes[name] = RouteEntry(name, data["table"], int(data["created_ms"]))
        elif text.startswith(CONSUMER_PREFIX):
            route, _, consumer_id = text.removeprefix(CONSUMER_PREFIX).partition("/")
            if not consumer_id:
                return
            members = self.consumers.setdefault(route, {})
            if value is None:
                members.pop(consumer_id, None)
                if not members:
                    del self.consumers[route]
                return
            data = json.loads(value)
            members[consumer_id] = Registration(
                route=route,
                id=consumer_id,
                address=str(data["address"]),
                capacity=int(data["capacity"]),
                joined_ms=int(data["joined_ms"]),
                expires_ms=int(data["expires_ms"]),
            )

    def apply_all(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            self.apply(key, value)

    def of_route(self, route: str) -> list[Registration]:
        """The route's registrations, oldest first."""
        members = self.consumers.get(route, {})
        return sorted(members.values(), key=lambda r: (r.joined_ms, r.id))


def api_route(
    records: Iterable[tuple[bytes, bytes | None]],
    name: str,
    existing: Sequence[RouteConfig] = (),
    clusters: Sequence[str] = (),
) -> RouteConfig | None:
    """The route ``name`` made through the control API, as the registry's records keep it
    (``ConfigError`` when it no longer validates), or ``None``."""
    state = RegistryState()
    state.apply_all(records)
    entry = state.routes.get(name)
    return None if entry is None else parse_route(entry.table, existing, clusters)


def _consumer_key(route: str, consumer_id: str) -> bytes:
    return f"{CONSUMER_PREFIX}{route}/{consumer_id}".encode()


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
