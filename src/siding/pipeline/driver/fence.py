"""A route's fence on the driver: claim the lease in the route's ``state-fence`` topic, renew it,
know at once when it is lost, release it on a clean stop (docs/operations.md, "Two drivers for
one route: the fence"). The decisions are ``siding.pipeline.executor.lease``'s; this is the I/O.

States: *watching* (``acquire`` reads the topic and waits while another driver holds it),
*holding* (a thread renews every ``renew``; the lease is this driver's until
``lease.holder_until`` of its last acknowledged renewal), *lost* (a newer claim was read, or the
lease ran out unrenewed: a frozen driver finds that on its own clock the moment it resumes; the
route is stopped through ``on_lost``), *released*.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from siding import naming
from siding.config import FenceConfig
from siding.errors import RouteStopped
from siding.kafka.tail import TopicTail
from siding.pipeline.executor import lease
from siding.pipeline.executor.fence_gate import FencePlan

log = logging.getLogger(__name__)

# A fence topic that cannot be read for this long at start stops the route.
READ_GIVE_UP_S = 30.0
# How long a claim waits for Kafka to acknowledge it (a first write also connects).
CLAIM_TIMEOUT_S = 30.0


def driver_id() -> str:
    """Who this driver is, in the fence's records: host, pid and a unique tail."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RouteFence:
    def __init__(
        self,
        client_conf: Mapping[str, object],
        route: str,
        settings: FenceConfig,
        me: str,
        on_lost: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.route = route
        self.topic = naming.state_topic(route, naming.FENCE)
        self.settings = settings
        self.me = me
        self._on_lost = on_lost
        self._conf = dict(client_conf)
        self._tail: TopicTail | None = None
        self._producer: Any = None
        self._current: lease.Lease | None = None
        self._seen_at = 0.0
        self._epoch = 0
        self._until = 0.0  # monotonic
        self._lost: str | None = None
        self._waiting = False
        self._told = False  # on_lost was called
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- watching -------------------------------------------------------------------------

    def _watch(self) -> None:
        if self._tail is None:
            self._tail = TopicTail(self._conf, self.topic)
        try:
            read = self._tail.read_new(10.0)
        except Exception:  # a topic created a moment ago may not be known yet: a new client
            tail, self._tail = self._tail, None
            tail.close()
            raise
        records = [r for _, v in read if (r := lease.decode(v)) is not None]
        current, changed = lease.fold_all(self._current, records)
        if changed:
            self._current, self._seen_at = current, time.monotonic()

    def _open_producer(self) -> Any:
        """The fence's producer, made early so that its first write does not also wait for its
        connection and producer id (on a loaded machine that took more than a second)."""
        if self._producer is None:
            conf = {**self._conf, "acks": "all", "enable.idempotence": True, "linger.ms": 0}
            self._producer = Producer(conf)
        return self._producer

    def _write(self, record: lease.Lease, timeout_s: float) -> None:
        """Write ``record`` and wait up to ``timeout_s`` for Kafka's acknowledgement. One not
        acknowledged in time may still land later: a late claim or renewal only makes the
        others wait longer, and a late one of an older epoch changes nothing (``lease.fold``)."""
        producer = self._open_producer()
        key, value = lease.encode(record, int(time.time() * 1000))
        errors: list[str] = []
        producer.produce(
            self.topic,
            key=key,
            value=value,
            on_delivery=lambda err, _msg: errors.append(err.str()) if err else None,
        )
        left = producer.flush(max(0.1, timeout_s))
        if errors:
            raise RouteStopped(f"route {self.route}: fence record not written: {errors[0]}")
        if left:
            raise RouteStopped(
                f"route {self.route}: fence record not acknowledged within {timeout_s:.1f}s"
            )

    def acquire(self, stop: threading.Event, *, standby: bool) -> None:
        """Hold the route's fence, or raise ``RouteStopped``. Waits while another driver's
        lease runs (watching for its renewals); without ``standby``, a lease that is being
        renewed is refused once seen renewed past one lease length (``lease.outwaited``)."""
        self._open_producer()
        self._seen_at = time.monotonic()  # a lease found at start is timed from now
        started = self._seen_at
        found_at: float | None = None  # when a held lease was first read
        self._waiting = True
        try:
            while not stop.is_set():
                try:
                    self._watch()
                except Exception as exc:
                    if time.monotonic() - started > READ_GIVE_UP_S:
                        raise RouteStopped(f"route {self.route}: fence not read: {exc}") from exc
                    stop.wait(0.2)
                    continue
                verdict = lease.decide(self._current, self._seen_at, time.monotonic())
                if isinstance(verdict, lease.Free):
                    if self._claim(verdict.epoch):
                        return
                    continue
                if found_at is None:
                    found_at = self._seen_at
                if not standby and lease.outwaited(self._current, found_at, self._seen_at):
                    raise RouteStopped(
                        f"route {self.route} is run by {verdict.holder} (fence epoch"
                        f" {verdict.epoch}); start this one with --standby to wait for it"
                    )
                wait = min(self.settings.renew / 2, verdict.expires_in_s)
                stop.wait(max(0.05, wait))
            raise RouteStopped(f"route {self.route}: stopped while waiting for its fence")
        finally:
            self._waiting = False

    def _claim(self, epoch: int) -> bool:
        sent = time.monotonic()
        self._write(lease.Lease(epoch, self.me, self.settings.lease), CLAIM_TIMEOUT_S)
        self._watch()
        if not lease.won(self._current, self.me, epoch):
            return False
        with self._lock:
            self._epoch, self._lost = epoch, None
            self._until = lease.holder_until(sent, self.settings.lease)
        log.info("route %s: holds its fence (epoch %d)", self.route, epoch)
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name=f"fence-{self.route}")
        self._thread.daemon = True
        self._thread.start()
        return True

    # -- holding --------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.settings.renew):
            if self.lost() is not None:
                break
            try:
                self._watch()
                if not lease.won(self._current, self.me, self._epoch):
                    held = self._current
                    who = f"{held.holder} (epoch {held.epoch})" if held else "another driver"
                    self._lose(f"lost its fence to {who}")
                    break
                sent = time.monotonic()
                if self.lost() is not None:  # frozen between the read and now
                    break
                # Waiting longer than the lease this driver still holds is of no use.
                left = self._until - time.monotonic()
                self._write(lease.Lease(self._epoch, self.me, self.settings.lease), left)
                with self._lock:
                    self._until = max(self._until, lease.holder_until(sent, self.settings.lease))
            except Exception as exc:  # the lease runs out unless a later renewal works
                log.warning("route %s: fence not renewed: %s", self.route, exc)
        reason = self.lost()
        if reason is not None:
            self._lose(reason)

    def _lose(self, reason: str) -> None:
        with self._lock:
            first, self._told = not self._told, True
            self._lost = self._lost or reason
        if first:
            self._on_lost(f"route {self.route}: {reason}; stopped, nothing committed")

    def lost(self) -> str | None:
        """Why this driver no longer holds the route, or ``None`` while it does (or holds
        nothing yet). Its own clock is enough: a driver frozen past its lease knows on resume."""
        with self._lock:
            if self._lost is not None:
                return self._lost
            if self._epoch and time.monotonic() > self._until:
                self._lost = (
                    f"its fence lease (epoch {self._epoch}) ran out unrenewed (the driver"
                    " was paused or cut off from Kafka)"
                )
            return self._lost

    def plan(self) -> FencePlan | None:
        """What the batch's tasks check their writes against."""
        return FencePlan(self.route, self.topic, self._epoch) if self._epoch else None

    def state(self) -> dict[str, object]:
        """For /status: the holder, its epoch, whether this driver waits as a standby."""
        current = self._current
        return {
            "holder": current.holder if current else None,
            "epoch": current.epoch if current else 0,
            "released": bool(current and current.released),
            "me": self.me,
            "holding": bool(self._epoch) and self.lost() is None,
            "waiting": self._waiting,
            "lost": self._lost,
        }

    # -- release --------------------------------------------------------------------------

    def release(self) -> None:
        """Stop renewing; a lease still held is released (a standby takes it at once)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.settings.renew + 1)
        try:
            if self._epoch and self.lost() is None:
                released = lease.Lease(self._epoch, self.me, self.settings.lease, released=True)
                self._write(released, self.settings.lease / 2)
                log.info("route %s: released its fence (epoch %d)", self.route, self._epoch)
        except Exception as exc:  # it then expires instead
            log.warning("route %s: fence not released: %s", self.route, exc)
        with self._lock:
            self._lost = self._lost or "released"
        tail, self._tail = self._tail, None
        if tail is not None:
            tail.close()
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(1.0)
