"""Calls in flight now: each worker process counts the calls it has open at its consumers, per
route and lane, and reports them to the route's ``live`` state topic about once a second while
any is open (docs/operations.md, "In flight now").

The count is taken at the transport, so it includes the calls a batch parked (still running
between batches) and the park lane's own calls. The driver sums the fresh report of every
worker process (``in_flight_now``); a report older than ``STALE_MS`` is from a worker that
stopped reporting (it went idle after saying 0, or it died) and counts as nothing.

Reports are best effort: a report that cannot be written is dropped (the next one replaces
it); nothing here decides the fate of a record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from siding.model import Delivery, Outcome
from siding.routing.producer import OutRecord
from siding.transport.base import Transport

log = logging.getLogger(__name__)

REPORT_S = 1.0
STALE_MS = 5_000
Writer = Callable[[Sequence[OutRecord]], None]


# -- pure: the report's form, and what the driver makes of many ----------------------------------


@dataclass(frozen=True, slots=True)
class LiveReport:
    """One worker process's calls in flight for one route, by lane, at ``at_ms``."""

    worker: str
    at_ms: int
    by_lane: Mapping[int, int]


def encode_report(by_lane: Mapping[int, int], at_ms: int) -> bytes:
    return json.dumps(
        {"at_ms": at_ms, "in_flight": {str(lane): n for lane, n in sorted(by_lane.items())}},
        separators=(",", ":"),
    ).encode()


def decode_report(worker: bytes, value: bytes | None) -> LiveReport | None:
    """The report in a record, or ``None`` for a tombstone or a value siding did not write."""
    if value is None:
        return None
    try:
        document = json.loads(value)
        lanes = {int(lane): int(n) for lane, n in document["in_flight"].items()}
        return LiveReport(worker.decode(errors="replace"), int(document["at_ms"]), lanes)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def in_flight_now(
    reports: Iterable[LiveReport], now_ms: int, stale_ms: int = STALE_MS
) -> dict[int, int]:
    """Calls in flight by lane: the sum of every worker's fresh report (lanes at 0 left out)."""
    total: Counter[int] = Counter()
    for report in reports:
        if now_ms - report.at_ms <= stale_ms:
            total.update({lane: n for lane, n in report.by_lane.items() if n > 0})
    return dict(total)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# -- the worker side: counting at the transport, reporting from the loop ------------------------


class _Counting:
    """A transport that counts its open calls in ``LiveCalls`` (only ``send`` is counted)."""

    def __init__(self, inner: Transport, calls: LiveCalls, route: str) -> None:
        self._inner, self._calls, self._route = inner, calls, route

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        key = (self._route, delivery.lane)
        self._calls.opened(key)
        try:
            return await self._inner.send(delivery, deadline_s)
        finally:
            self._calls.closed(key)

    async def probe(self) -> bool:
        return await self._inner.probe()

    async def close(self) -> None:
        await self._inner.close()


@dataclass
class _Sink:
    topic: str
    writer: Writer
    last_sent: dict[int, int] | None = None
    last_at: float = 0.0
    writing: asyncio.Task[None] | None = None


@dataclass
class LiveCalls:
    """Lives on the worker's event loop: counts, and the reporter task that writes them."""

    loop: asyncio.AbstractEventLoop
    clock: Callable[[], float] = time.time
    interval_s: float = REPORT_S
    _counts: Counter[tuple[str, int]] = field(default_factory=Counter)
    _sinks: dict[str, _Sink] = field(default_factory=dict)
    _reporter: asyncio.Task[None] | None = None
    _worker: str = field(default_factory=worker_name)
    # Reports are written on threads of their own: a write that hangs until its timeout must
    # not hold up the loop's default executor, where parked calls write their settlements.
    _writers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="siding-live")
    )

    def counting(self, route: str, transport: Transport) -> Transport:
        return _Counting(transport, self, route)

    def opened(self, key: tuple[str, int]) -> None:
        self._counts[key] += 1

    def closed(self, key: tuple[str, int]) -> None:
        self._counts[key] -= 1

    def by_lane(self, route: str) -> dict[int, int]:
        return {lane: n for (r, lane), n in self._counts.items() if r == route and n > 0}

    def report_to(self, route: str, topic: str, writer: Writer) -> None:
        """Report ``route``'s calls to ``topic`` from now on (any thread; idempotent)."""
        self.loop.call_soon_threadsafe(self._add_sink, route, topic, writer)

    def _add_sink(self, route: str, topic: str, writer: Writer) -> None:
        sink = self._sinks.get(route)
        if sink is None or sink.topic != topic:
            self._sinks[route] = _Sink(topic, writer)
        if self._reporter is None or self._reporter.done():
            self._reporter = self.loop.create_task(self._report())

    def due(self, route: str, now: float) -> dict[int, int] | None:
        """What to report for ``route`` now, or ``None``: a change at once, open calls again
        each interval (so the driver knows the report is fresh), nothing while all stays 0."""
        sink = self._sinks[route]
        current = self.by_lane(route)
        if current != sink.last_sent or (current and now - sink.last_at >= self.interval_s):
            return current
        return None

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            # Each route's report on its own: a sink whose write hangs (its Kafka away, its topic
            # gone with a route deleted at runtime) holds no other route's report back; its own
            # next report waits until that write ended.
            for route, sink in list(self._sinks.items()):
                if sink.writing is None or sink.writing.done():
                    sink.writing = self.loop.create_task(self._report_one(route, sink))

    async def _report_one(self, route: str, sink: _Sink) -> None:
        now = self.clock()
        current = self.due(route, now)
        if current is None:
            return
        record = OutRecord(
            sink.topic, self._worker.encode(), encode_report(current, int(now * 1000)), ()
        )
        try:
            await self.loop.run_in_executor(self._writers, sink.writer, [record])
        except Exception as exc:  # best effort: the next report replaces this one
            log.debug("in-flight report for %s not written: %s", route, exc)
            if current:
                return
            # Nothing open: the driver reads the last report as nothing once it is stale, so a
            # report of 0 that cannot be written is not tried again every interval.
        sink.last_sent, sink.last_at = current, now
