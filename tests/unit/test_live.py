"""Calls in flight now: counted at the transport, reported by each worker, summed by the driver."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from siding.control.kafka_view import RouteKafka, in_flight_by_label
from siding.control.prometheus import kafka_families
from siding.control.status import kafka_document
from siding.model import Delivery, Outcome, OutcomeKind
from siding.pipeline.executor.live import (
    LiveCalls,
    LiveReport,
    decode_report,
    encode_report,
    in_flight_now,
)
from siding.routing.producer import OutRecord


def test_a_report_reads_back_as_written() -> None:
    value = encode_report({0: 3, 2: 1}, 1_000)
    assert decode_report(b"host:7", value) == LiveReport("host:7", 1_000, {0: 3, 2: 1})


def test_what_siding_did_not_write_is_no_report() -> None:
    assert decode_report(b"w", None) is None  # a tombstone
    assert decode_report(b"w", b"not json") is None
    assert decode_report(b"w", b'{"at_ms": 1}') is None
    assert decode_report(b"w", b'{"at_ms": 1, "in_flight": {"main": 2}}') is None
    assert decode_report(b"w", b"[1, 2]") is None


def test_the_driver_sums_fresh_reports_and_forgets_stale_ones() -> None:
    reports = [
        LiveReport("a:1", 10_000, {0: 3, 1: 2}),
        LiveReport("b:2", 9_000, {0: 4, 1: 0}),
        LiveReport("c:3", 4_000, {0: 50}),  # 6 s old: the worker died or went idle
    ]
    assert in_flight_now(reports, now_ms=10_000) == {0: 7, 1: 2}
    assert in_flight_by_label(reports, 10_000) == (("main", 7), ("retry-1", 2))
    assert in_flight_now(reports, now_ms=20_000) == {}


class _SlowTransport:
    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def send(self, _delivery: Delivery, _deadline_s: float) -> Outcome:
        await self.release.wait()
        return Outcome(OutcomeKind.ACK)

    async def probe(self) -> bool:
        return True

    async def close(self) -> None:
        return None


def _delivery(n: int, lane: int) -> Delivery:
    return Delivery(f"id-{n}", "t", 0, n, None, b"v", lane=lane)


def test_open_calls_are_counted_by_route_and_lane_and_reported_until_they_close() -> None:
    async def scenario() -> list[list[OutRecord]]:
        loop = asyncio.get_running_loop()
        written: list[list[OutRecord]] = []

        def writer(records: Sequence[OutRecord]) -> None:
            written.append(list(records))

        calls = LiveCalls(loop, interval_s=0.02)
        inner = _SlowTransport()
        transport = calls.counting("orders", inner)
        calls.report_to("orders", "siding.orders.state-live", writer)
        sends = [
            asyncio.create_task(transport.send(_delivery(n, lane), 1.0))
            for n, lane in enumerate([0, 0, 0, 1])
        ]
        await asyncio.sleep(0.1)
        assert calls.by_lane("orders") == {0: 3, 1: 1}
        assert calls.by_lane("other") == {}
        inner.release.set()
        assert all(o.kind is OutcomeKind.ACK for o in await asyncio.gather(*sends))
        assert calls.by_lane("orders") == {}
        await asyncio.sleep(0.1)
        return written

    written = asyncio.run(scenario())
    reports = [decode_report(r.key or b"", r.value) for batch in written for r in batch]
    assert {r.topic for batch in written for r in batch} == {"siding.orders.state-live"}
    lanes = [r.by_lane for r in reports if r is not None]
    # Open calls are reported again each interval; once all closed, one report of 0, then none.
    assert lanes.count({0: 3, 1: 1}) >= 2
    assert lanes[-1] == {} and lanes.count({}) == 1


def test_a_report_that_cannot_be_written_is_dropped_and_the_next_one_goes() -> None:
    async def scenario() -> list[OutRecord]:
        loop = asyncio.get_running_loop()
        written: list[OutRecord] = []
        failures = [1]

        def writer(records: Sequence[OutRecord]) -> None:
            if failures:
                failures.pop()
                raise RuntimeError("kafka away")
            written.extend(records)

        calls = LiveCalls(loop, interval_s=0.02)
        inner = _SlowTransport()
        transport = calls.counting("orders", inner)
        calls.report_to("orders", "live", writer)
        send = asyncio.create_task(transport.send(_delivery(1, 0), 1.0))
        await asyncio.sleep(0.15)
        inner.release.set()
        await send
        return written

    written = asyncio.run(scenario())
    assert written, "the report after a failed one was written"


def test_a_sink_that_cannot_be_written_holds_no_other_route_back() -> None:
    """A route whose reports hang (its Kafka away, its topic deleted) must not stop the others'
    reports: the driver reads a report older than 5 s as nothing."""

    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        orders: list[OutRecord] = []
        tries = [0]

        def hangs(_: Sequence[OutRecord]) -> None:
            tries[0] += 1
            time.sleep(0.4)
            raise RuntimeError("timed out")

        calls = LiveCalls(loop, interval_s=0.02)
        inner = _SlowTransport()
        calls.report_to("gone", "siding.gone.state-live", hangs)
        calls.report_to("orders", "siding.orders.state-live", orders.extend)
        send = asyncio.create_task(calls.counting("orders", inner).send(_delivery(1, 0), 5.0))
        await asyncio.sleep(1.0)
        inner.release.set()
        await send
        return len(orders), tries[0]

    reported, tries = asyncio.run(scenario())
    assert reported >= 10, f"only {reported} reports in 1 s at a 20 ms interval"
    # Nothing was open on "gone": its report of 0 is not tried again every interval.
    assert tries == 1


def test_status_and_metrics_show_the_calls_open_now() -> None:
    facts = RouteKafka(in_flight=(("main", 7), ("retry-1", 2)), in_flight_at_ms=5_000)
    document = kafka_document(facts)
    assert document["in_flight"] == {
        "total": 9,
        "by_lane": {"main": 7, "retry-1": 2},
        "at_ms": 5_000,
    }
    families = {f.name: f for f in kafka_families(["orders"], lambda _route: facts, 5_000)}
    samples = {tuple(s.labels.values()): s.value for s in families["siding_in_flight"].samples}
    assert samples == {("orders", "main"): 7, ("orders", "retry-1"): 2}


def test_a_route_with_nothing_open_shows_zero_on_its_main_lane() -> None:
    facts = RouteKafka(in_flight=(), in_flight_at_ms=5_000)
    families = {f.name: f for f in kafka_families(["orders"], lambda _route: facts, 5_000)}
    samples = {tuple(s.labels.values()): s.value for s in families["siding_in_flight"].samples}
    assert samples == {("orders", "main"): 0}
    # Before the first read there is no series at all (unknown is not 0).
    unread = {f.name: f for f in kafka_families(["orders"], lambda _route: RouteKafka(), 5_000)}
    assert unread["siding_in_flight"].samples == []
