"""The driver's registry (docs/registration.md): routes made through the control API and the
consumer instances that joined routes, kept in the registry topic; it starts and stops API
routes in the running application, lets leases lapse, and audits every change.

Thread-safe: the control API's threads call it, a reaper thread lets leases lapse.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from siding import naming
from siding.config import DEFAULT_CLUSTER, RouteConfig, SidingConfig, cluster_name, parse_route
from siding.dlq.audit import audit_event, audit_record
from siding.errors import ConfigError, DurableWriteError, SidingError
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics, with_retries
from siding.kafka.reader import read_to_end
from siding.pipeline.driver.controls import ControlError
from siding.registry.join import join_request, refusal
from siding.registry.records import (
    Registration,
    RegistryState,
    RouteEntry,
    alive_record,
    lapsed,
    paused,
    registration_record,
    registration_tombstone,
    renewed,
    route_record,
    route_tombstone,
)
from siding.routing.producer import DurableProducer, OutRecord

log = logging.getLogger("siding.registry")

# How often lapsed leases are looked for: an instance is dropped at most this long after.
REAP_S = 0.5
# How often the driver writes that it runs: after a restart, leases are moved on by the time
# since the last of these (they do not run while siding is down).
ALIVE_S = 2.0
# A deleted route's running batches get this long past its longest deadline to commit.
DELETE_SLACK_S = 5.0


class RouteHost(Protocol):
    """What runs the routes (``siding.pipeline.driver.app.Application``)."""

    def add_route(self, route: RouteConfig) -> None: ...

    def remove_route(self, name: str, timeout_s: float) -> dict[str, dict[int, int]]: ...


class RegistryService:
    """``open()`` before the application starts (it returns the API routes to run), then
    ``attach`` the application, ``start`` the reaper, and ``stop`` at the end."""

    def __init__(
        self,
        config: SidingConfig,
        *,
        clock: Callable[[], float] = time.time,
        reap_s: float = REAP_S,
    ) -> None:
        self._file_routes = {route.name: route for route in config.route}
        self._topic = config.control.registry_topic
        self._client_conf = dict(config.kafka.client_config())
        self._kafka = config.kafka
        # Producers of the audit events of routes that write to another cluster, by its name.
        self._audit_producers: dict[str, DurableProducer] = {}
        self._clock = clock
        self._reap_s = reap_s
        self._lock = threading.Lock()  # the state below
        self._changing = threading.Lock()  # one route created or deleted at a time
        self._state = RegistryState()
        self._api_routes: dict[str, RouteConfig] = {}
        self._producer: DurableProducer | None = None
        self._host: RouteHost | None = None
        self._on_routes: Callable[[Sequence[RouteConfig]], None] = lambda _: None
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._alive_at = 0.0

    # -- life -------------------------------------------------------------------------------

    def open(self) -> list[RouteConfig]:
        """Create the registry topic if needed and read it: the API routes that come back (a
        route the config file now defines, or that no longer validates, is skipped with a
        warning), and the registrations, as they were."""
        admin = admin_client({k: str(v) for k, v in self._client_conf.items()})
        with_retries(lambda: ensure_topics(admin, [TopicSpec(self._topic, 1, naming.COMPACTED)]))
        self._state.apply_all(read_to_end(self._client_conf, self._topic))
        self._producer = DurableProducer(self._client_conf)
        self._pause_leases()
        for name, entry in sorted(self._state.routes.items()):
            if name in self._file_routes:
                log.warning("registry: route %s made through the API is now in the config file;"
                            " the file's route runs", name)  # fmt: skip
                continue
            try:
                route = parse_route(
                    entry.table,
                    [*self._file_routes.values(), *self._api()],
                    clusters=self._kafka.names,
                )
            except ConfigError as exc:
                log.error("registry: route %s made through the API does not validate any more"
                          " and is not started: %s", name, exc)  # fmt: skip
                continue
            self._api_routes[name] = route
        self._ensure_audit(admin, [r for r in self.routes_now() if r.takes_registrations])
        kept = len(self._api_routes)
        joined = sum(len(self._state.of_route(r.name)) for r in self.routes_now())
        log.info("registry: %d route(s) made through the API and %d consumer registration(s)"
                 " read from %s", kept, joined, self._topic)  # fmt: skip
        return list(self._api_routes.values())

    def _pause_leases(self) -> None:
        """Leases do not run while siding is down: each is moved on by the time since the
        driver last said it ran (so an instance that could not renew is not dropped for it)."""
        now = self._now_ms()
        away_ms = now - self._state.alive_ms if self._state.alive_ms else 0
        regs = [r for route in list(self._state.consumers) for r in self._state.of_route(route)]
        records = [alive_record(self._topic, now)]
        if away_ms > 0 and regs:
            moved = [paused(r, away_ms) for r in regs]
            for reg in moved:
                self._state.consumers[reg.route][reg.id] = reg
            records += [registration_record(self._topic, reg) for reg in moved]
            log.info("registry: siding was down for %.1fs: %d lease(s) moved on by as much",
                     away_ms / 1000, len(moved))  # fmt: skip
        self._write(records)
        self._alive_at = time.monotonic()

    def attach(
        self,
        host: RouteHost,
        on_routes: Callable[[Sequence[RouteConfig]], None] = lambda _: None,
    ) -> None:
        """``on_routes(routes)`` hears of the routes running after each change."""
        self._host = host
        self._on_routes = on_routes

    @property
    def running(self) -> bool:
        """Whether the application runs (attached): before that, routes cannot change."""
        return self._host is not None

    def start(self) -> RegistryService:
        self._reaper = threading.Thread(target=self._reap_loop, name="siding-registry", daemon=True)
        self._reaper.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(5)
        if self._producer is not None:
            self._producer.close()
        for producer in self._audit_producers.values():
            producer.close()
        self._audit_producers.clear()

    # -- routes -----------------------------------------------------------------------------

    def _api(self) -> list[RouteConfig]:
        return list(self._api_routes.values())

    def routes_now(self) -> list[RouteConfig]:
        with self._lock:
            return [*self._file_routes.values(), *self._api_routes.values()]

    def route(self, name: str) -> RouteConfig:
        """The running route ``name``; ``ControlError`` 404 when there is none."""
        with self._lock:
            route = self._file_routes.get(name) or self._api_routes.get(name)
        if route is None:
            raise ControlError(404, f"no route named {name!r}")
        return route

    def list_routes(self) -> dict[str, object]:
        with self._lock:
            listed = [
                self._describe(route, origin)
                for origin, routes in (("config", self._file_routes), ("api", self._api_routes))
                for route in routes.values()
            ]
        return {"routes": listed}

    def _describe(self, route: RouteConfig, origin: str) -> dict[str, object]:
        entry = self._state.routes.get(route.name) if origin == "api" else None
        out: dict[str, object] = {
            "name": route.name,
            "origin": origin,
            "takes_registrations": route.takes_registrations,
            "consumers": len(self._state.of_route(route.name)),
            "route": route.redacted(),
        }
        if entry is not None:
            out["created_ms"] = entry.created_ms
        return out

    def create_route(self, body: bytes, who: str) -> dict[str, object]:
        """``POST /routes``: validate, start it, keep it; 400 names the bad key."""
        table = _json_object(body)
        with self._changing:
            try:
                route = parse_route(table, self.routes_now(), clusters=self._kafka.names)
            except ConfigError as exc:
                raise ControlError(400, str(exc)) from None
            host = self._running_host()
            try:
                host.add_route(route)
            except SidingError as exc:
                raise ControlError(400, f"route[{route.name}]: {exc}") from None
            entry = RouteEntry(route.name, table, self._now_ms())
            try:
                self._write([route_record(self._topic, entry)])
            except ControlError:
                host.remove_route(route.name, _delete_timeout(route))
                raise
            with self._lock:
                self._state.routes[route.name] = entry
                self._api_routes[route.name] = route
            self._ensure_audit(None, [route])
            source = route.source_label
            self._audit(route, "route create", who, {"topic": source, "group": route.group})
            log.info("registry: route %s created (topic %s, group %s) by %s",
                     route.name, source, route.group, who)  # fmt: skip
            self._on_routes(self.routes_now())
            return self._describe(route, "api")

    def delete_route(self, name: str, who: str) -> dict[str, object]:
        """``DELETE /routes/<name>``: stop it once its running batches committed, forget it
        and its registrations. A route of the config file is refused (409)."""
        with self._changing:
            route = self.route(name)
            if name in self._file_routes:
                raise ControlError(409, f"route {name} is defined in the config file: remove it"
                                        " there and restart siding")  # fmt: skip
            host = self._running_host()
            committed = host.remove_route(name, _delete_timeout(route))
            with self._lock:
                dropped = self._state.of_route(name)
            records = [registration_tombstone(self._topic, name, r.id) for r in dropped]
            self._write([*records, route_tombstone(self._topic, name)])
            with self._lock:
                self._api_routes.pop(name, None)
                self._state.routes.pop(name, None)
                self._state.consumers.pop(name, None)
            for reg in dropped:
                self._audit(route, "consumer leave", who, {**_about(reg), "why": "route deleted"})
            self._audit(route, "route delete", who, {"committed": _offsets_text(committed)})
            log.info("registry: route %s deleted by %s; group %s committed at %s",
                     name, who, route.group, _offsets_text(committed))  # fmt: skip
            self._on_routes(self.routes_now())
            return {"deleted": name, "committed": _offsets_text(committed)}

    def _running_host(self) -> RouteHost:
        if self._host is None:
            raise ControlError(503, "siding is starting: routes cannot change yet")
        return self._host

    # -- consumers --------------------------------------------------------------------------

    def join_token(self, name: str) -> str | None:
        """The route's own registration token (the admin token also works); 404 / 409 when
        the route does not exist or takes no registrations."""
        route = self.route(name)
        if not route.takes_registrations:
            raise ControlError(409, f"route {name} takes no registrations: it lists endpoints"
                                    " and has no registration_token")  # fmt: skip
        token = route.registration_token
        return token.get_secret_value() if token is not None else None

    def join(self, name: str, body: bytes, who: str) -> tuple[int, dict[str, object]]:
        """``POST /routes/<name>/consumers``: 201 with a new lease, or 200 with the renewed
        lease of the instance already registered at that address."""
        route = self.route(name)
        try:
            request = join_request(_json_object(body))
        except ConfigError as exc:
            raise ControlError(400, str(exc)) from None
        why = refusal(route, request.endpoint)
        if why is not None:
            raise ControlError(400, f"address: {why}")
        now = self._now_ms()
        with self._lock:
            same = [r for r in self._state.of_route(name) if r.address == request.endpoint.url]
        if same:
            reg = renewed(same[0], now, route.lease)
            if reg.capacity != request.capacity:
                reg = Registration(reg.route, reg.id, reg.address, request.capacity,
                                   reg.joined_ms, reg.expires_ms)  # fmt: skip
            self._keep(reg)
            return 200, self._lease(reg, route)
        reg = Registration(name, uuid.uuid4().hex[:16], request.endpoint.url, request.capacity,
                           now, renewed_ms(now, route.lease))  # fmt: skip
        self._keep(reg)
        self._audit(route, "consumer join", who, _about(reg))
        log.info("registry: consumer %s joined route %s at %s (capacity %d, lease %gs) by %s",
                 reg.id, name, reg.address, reg.capacity, route.lease, who)  # fmt: skip
        return 201, self._lease(reg, route)

    def renew(self, name: str, consumer_id: str) -> dict[str, object]:
        """``PUT /routes/<name>/consumers/<id>``: the lease runs again from now."""
        route = self.route(name)
        reg = renewed(self._registration(name, consumer_id), self._now_ms(), route.lease)
        self._keep(reg)
        return self._lease(reg, route)

    def leave(self, name: str, consumer_id: str, who: str) -> dict[str, object]:
        """``DELETE /routes/<name>/consumers/<id>``: no new deliveries go there."""
        route = self.route(name)
        reg = self._registration(name, consumer_id)
        self._drop(reg)
        self._audit(route, "consumer leave", who, _about(reg))
        log.info("registry: consumer %s left route %s (%s) by %s", reg.id, name, reg.address, who)
        return {"left": reg.id, "route": name}

    def consumers(self, name: str) -> dict[str, object]:
        route = self.route(name)
        now = self._now_ms()
        with self._lock:
            regs = self._state.of_route(name)
        return {
            "route": name,
            "takes_registrations": route.takes_registrations,
            "lease_s": route.lease,
            "endpoints": [e.url for e in route.endpoint],
            "consumers": [
                {**_about(r), "joined_ms": r.joined_ms, "expires_in_s": (r.expires_ms - now) / 1000}
                for r in regs
            ],
        }

    def _registration(self, name: str, consumer_id: str) -> Registration:
        with self._lock:
            reg = self._state.consumers.get(name, {}).get(consumer_id)
        if reg is None:
            raise ControlError(404, f"no consumer {consumer_id} on route {name} (its lease may"
                                    " have lapsed): join again")  # fmt: skip
        return reg

    def _keep(self, reg: Registration) -> None:
        self._write([registration_record(self._topic, reg)])
        with self._lock:
            self._state.consumers.setdefault(reg.route, {})[reg.id] = reg

    def _drop(self, reg: Registration) -> None:
        self._write([registration_tombstone(self._topic, reg.route, reg.id)])
        with self._lock:
            members = self._state.consumers.get(reg.route, {})
            members.pop(reg.id, None)
            if not members:
                self._state.consumers.pop(reg.route, None)

    def _lease(self, reg: Registration, route: RouteConfig) -> dict[str, object]:
        return {
            **_about(reg),
            "route": reg.route,
            "lease_s": route.lease,
            "expires_ms": reg.expires_ms,
            "renew": f"PUT /routes/{reg.route}/consumers/{reg.id}",
        }

    # -- leases -----------------------------------------------------------------------------

    def reap(self) -> list[Registration]:
        """Drop every registration whose lease lapsed, and those of routes that are gone."""
        now = self._now_ms()
        with self._lock:
            running = {*self._file_routes, *self._api_routes}
            regs = [r for route in self._state.consumers for r in self._state.of_route(route)]
        gone = [r for r in regs if r.route not in running]
        expired = lapsed([r for r in regs if r.route in running], now)
        for reg in [*gone, *expired]:
            try:
                self._drop(reg)
            except ControlError as exc:
                log.warning("registry: %s not dropped yet: %s", reg.id, exc)
                continue
            if reg.route in running:
                late_s = (now - reg.expires_ms) / 1000
                self._audit(self.route(reg.route), "consumer expire", "siding", _about(reg))
                log.warning("registry: consumer %s of route %s (%s) dropped: its lease lapsed"
                            " %.1fs ago", reg.id, reg.route, reg.address, late_s)  # fmt: skip
            else:
                log.info("registry: consumer %s dropped: route %s is gone", reg.id, reg.route)
        return [*gone, *expired]

    def _reap_loop(self) -> None:
        while not self._stop.wait(self._reap_s):
            try:
                if time.monotonic() - self._alive_at >= ALIVE_S:
                    self._write([alive_record(self._topic, self._now_ms())])
                    self._alive_at = time.monotonic()
                self.reap()
            except ControlError as exc:  # Kafka away for a moment: next time
                log.warning("registry: %s", exc)
            except Exception:  # the reaper must outlive anything
                log.exception("registry: looking for lapsed leases failed")

    # -- writes -----------------------------------------------------------------------------

    def _write(self, records: list[OutRecord]) -> None:
        if self._producer is None:
            raise ControlError(503, "the registry is not open")
        try:
            self._producer.write(records, timeout_s=15)
        except DurableWriteError as exc:
            raise ControlError(503, f"the registry topic could not be written: {exc}") from None

    def _ensure_audit(self, admin: Any, routes: Sequence[RouteConfig]) -> None:
        """Each route's audit topic, on the cluster the route writes to."""
        for cluster in sorted({cluster_name(r, "write") for r in routes}):
            conf = self._kafka.cluster(cluster).client_config()
            on = admin if admin is not None and cluster == DEFAULT_CLUSTER else None
            if on is None:  # not ``or``: an AdminClient with nothing queued is falsy
                on = admin_client({k: str(v) for k, v in conf.items()})
            audits = [
                naming.topics_of(r).state(naming.AUDIT)
                for r in routes
                if cluster_name(r, "write") == cluster
            ]
            specs = [TopicSpec(t.name, t.partitions(), t.config()) for t in audits]
            with_retries(partial(ensure_topics, on, specs))

    def _audit(
        self, route: RouteConfig, command: str, who: str, extra: Mapping[str, object]
    ) -> None:
        """One event on the route's audit topic, in the DLQ tools' form (docs/dlq.md)."""
        owned = naming.topics_of(route)
        event = audit_event(
            at_ms=self._now_ms(),
            by=who,
            command=command,
            route=route.name,
            dlq_topic=owned.dlq.name,
            filter_={},
            count=1,
            extra=extra,
        )
        record = audit_record(owned.state(naming.AUDIT).name, event)
        cluster = cluster_name(route, "write")
        try:
            if cluster == DEFAULT_CLUSTER:
                self._write([record])
            else:
                self._audit_producer(cluster).write([record], timeout_s=15)
        # The change is made: say so, and that its audit is missing.
        except (ControlError, DurableWriteError) as exc:
            log.error("registry: audit event not written (%s): %s", json.dumps(event), exc)

    def _audit_producer(self, cluster: str) -> DurableProducer:
        with self._lock:
            producer = self._audit_producers.get(cluster)
            if producer is None:
                conf = self._kafka.cluster(cluster).client_config()
                producer = self._audit_producers[cluster] = DurableProducer(conf)
            return producer

    def _now_ms(self) -> int:
        return round(self._clock() * 1000)


def renewed_ms(now_ms: int, lease_s: float) -> int:
    return now_ms + round(lease_s * 1000)


def _about(reg: Registration) -> dict[str, object]:
    return {"consumer": reg.id, "address": reg.address, "capacity": reg.capacity}


def _delete_timeout(route: RouteConfig) -> float:
    deadlines = [route.deadline, *(lane.deadline_s for lane in route.lanes_as_model())]
    return max(deadlines) + DELETE_SLACK_S


def _offsets_text(committed: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    return {topic: {str(p): o for p, o in sorted(offsets.items())} for topic, offsets in
            committed.items()}  # fmt: skip


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise ControlError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ControlError(400, "the body must be a JSON object")
    return data
