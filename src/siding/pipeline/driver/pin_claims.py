"""Pins across ``siding run`` processes: a running pinned route claims its partitions in the
compacted topic ``siding.pins`` (renewed while it runs, a tombstone when it stops); a route
that starts refuses to when a live claim of another route of its group names a partition it
reads (docs/operations.md, "Splitting one topic over several proxies").

The decision (``live_claims``, ``conflict``) is pure; ``PinClaims`` reads and writes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from siding import naming
from siding.config import RouteConfig
from siding.config.pins import shared_partitions
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.kafka.reader import read_to_end
from siding.pipeline.driver.topics import RouteFailed
from siding.routing.producer import DurableProducer, OutRecord

log = logging.getLogger(__name__)

PINS_TOPIC = f"{naming.PREFIX}.pins"
# A claim not renewed for this long belongs to a process that is gone (crashed, killed).
PIN_LEASE_S = 30.0
PIN_RENEW_S = 5.0


@dataclass(frozen=True, slots=True)
class PinClaim:
    """One running route's partitions of one topic in one group."""

    route: str
    group: str
    topic: str
    partitions: tuple[int, ...]
    driver: str
    at_ms: int

    @property
    def key(self) -> bytes:
        return json.dumps([self.group, self.topic, self.route]).encode()

    def encode(self) -> bytes:
        return json.dumps({"version": 1, **asdict(self)}).encode()


def claims_of(route: RouteConfig, driver: str, now_ms: int) -> list[PinClaim]:
    """Pure: the claims a pinned route writes, one per pinned topic."""
    return [
        PinClaim(route.name, route.group, topic, parts, driver, now_ms)
        for topic, parts in route.pins.items()
    ]


def decode(value: bytes) -> PinClaim | None:
    """A claim from its record value; ``None`` for one this siding cannot read."""
    try:
        data = json.loads(value)
        return PinClaim(
            str(data["route"]),
            str(data["group"]),
            str(data["topic"]),
            tuple(int(p) for p in data["partitions"]),
            str(data["driver"]),
            int(data["at_ms"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def live_claims(
    records: Iterable[tuple[bytes, bytes | None]], now_ms: int, lease_ms: int
) -> list[PinClaim]:
    """Pure: the claims still held: the last record of each key, not a tombstone, renewed
    within ``lease_ms`` of ``now_ms``."""
    last: dict[bytes, bytes | None] = {}
    for key, value in records:
        last[key] = value
    claims = (decode(value) for value in last.values() if value is not None)
    return [c for c in claims if c is not None and now_ms - c.at_ms < lease_ms]


def conflict(route: RouteConfig, claims: Iterable[PinClaim], now_ms: int) -> str | None:
    """Pure: why ``route`` may not start beside the running routes that hold ``claims`` (a
    partition of a topic it reads, in its group, pinned to another route), or ``None``."""
    for claim in claims:
        if claim.route == route.name or claim.group != route.group or not route.reads(claim.topic):
            continue
        shared = shared_partitions(route.pinned(claim.topic), claim.partitions) or ()
        if shared:
            parts = ", ".join(str(p) for p in shared)
            age = max(0.0, (now_ms - claim.at_ms) / 1000)
            return (
                f"route {route.name}: partition(s) {parts} of topic {claim.topic} in group"
                f" {route.group} are pinned to route {claim.route}, running on {claim.driver}"
                f" (its claim in {PINS_TOPIC} renewed {age:.0f}s ago): the pins of one group"
                " must not overlap"
            )
    return None


class PinClaims:
    """A route's side of ``siding.pins``. ``open``: refuse a start that overlaps a running
    route's claim; a pinned route then writes its own claim, reads again (two routes that
    started at the same moment both see the other and both refuse) and renews it every
    ``PIN_RENEW_S`` on a thread. ``close``: stop renewing, write tombstones."""

    def __init__(self, client_conf: Mapping[str, object], route: RouteConfig, driver: str) -> None:
        self.route = route
        self.driver = driver
        self._conf = dict(client_conf)
        self._producer: DurableProducer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self, present: Mapping[str, int]) -> None:
        if not self.route.pins:
            if PINS_TOPIC in present:  # absent: no route was ever pinned on this cluster
                self._check()
            return
        admin = admin_client({k: str(v) for k, v in self._conf.items()})
        ensure_topics(admin, [TopicSpec(PINS_TOPIC, 1, naming.COMPACTED)])
        self._check()
        self._producer = DurableProducer(self._conf)
        self._write()
        try:
            self._check()
        except RouteFailed:
            self.close()
            raise
        self._thread = threading.Thread(
            target=self._renew, name=f"siding-pins-{self.route.name}", daemon=True
        )
        self._thread.start()

    def _check(self) -> None:
        now_ms = round(time.time() * 1000)
        claims = live_claims(read_to_end(self._conf, PINS_TOPIC), now_ms, round(PIN_LEASE_S * 1000))
        why = conflict(self.route, claims, now_ms)
        if why is not None:
            raise RouteFailed(why)

    def _write(self, *, tombstone: bool = False) -> None:
        assert self._producer is not None
        claims = claims_of(self.route, self.driver, round(time.time() * 1000))
        self._producer.write(
            [OutRecord(PINS_TOPIC, c.key, None if tombstone else c.encode(), ()) for c in claims]
        )

    def _renew(self) -> None:
        while not self._stop.wait(PIN_RENEW_S):
            try:
                self._write()
            except Exception as exc:  # the next renewal tries again; the lease is long
                log.warning("route %s: renewing its pin claim: %s", self.route.name, exc)

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(PIN_RENEW_S + 10)
        producer, self._producer = self._producer, None
        if producer is None:
            return
        self._producer = producer
        try:
            self._write(tombstone=True)
        except Exception as exc:  # the claim then lapses after PIN_LEASE_S
            log.warning("route %s: releasing its pin claim: %s", self.route.name, exc)
        finally:
            self._producer = None
            producer.close()
