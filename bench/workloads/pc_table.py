"""Parallel Consumer's published table: 10,000 messages, 1 partition, processing uniform 0-5 ms,
concurrency 100, four ordering modes; siding, Parallel Consumer and the serial consumer."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.baselines.serial import run_serial
from bench.peers import parallel_consumer as pc
from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import (
    done_span_s,
    extrapolated_seconds,
    first_receipts,
    planned_delay,
    rate_per_s,
)
from siding.devkit.sim_consumer import Behaviour, read_records
from siding.devkit.sim_produce import produce

MESSAGES = 10_000
CONCURRENCY = 100
MAX_SLEEP_MS = 5.0
SERIAL_WINDOW_S = 10.0
BEHAVIOUR = Behaviour(latency_s=(0.0, MAX_SLEEP_MS / 1000))


@dataclass(frozen=True, slots=True)
class Mode:
    entry: str
    keys: int | None
    pc_mode: str
    route: dict[str, object]
    # Parallel Consumer over the network too (the issue compares these modes with it).
    vertx: bool = False


# siding has no partition-order mode: one record in flight on the one partition is exactly it.
MODES = (
    Mode("pc_table_unordered", None, "UNORDERED", {"max_in_flight": CONCURRENCY}, vertx=True),
    Mode("pc_table_key10", 10, "KEY", {"max_in_flight": CONCURRENCY, "ordering": "key"}),
    Mode(
        "pc_table_key10000",
        10_000,
        "KEY",
        {"max_in_flight": CONCURRENCY, "ordering": "key"},
        vertx=True,
    ),
    Mode("pc_table_partition", None, "PARTITION", {"max_in_flight": 1}),
)


def _siding(ctx: BenchContext, topic: str, count: int, mode: Mode) -> tuple[float, float]:
    """(first -> last receipt, start -> group commit) in seconds."""
    record = ctx.record_file(mode.entry)
    with ctx.sim(BEHAVIOUR, record) as sim:
        route = {**mode.route, "adaptive": {"enabled": False}}
        started = time.monotonic()
        with ctx.pipeline(topic, sim.target, **route) as pipeline:
            pipeline.wait_committed({0: count}, timeout_s=count / 20 + 120)
            to_commit = time.monotonic() - started
    received = first_receipts(read_records(record))
    if len(received) != count:
        raise RuntimeError(f"{mode.entry}: consumer saw {len(received)} of {count} messages")
    return done_span_s(received.values(), planned_delay(BEHAVIOUR)), to_commit


def _vertx(
    ctx: BenchContext, classpath: str, topic: str, count: int, mode: Mode
) -> dict[str, object]:
    """Parallel Consumer over the network: HTTP to the simulated consumer (0-5 ms), the span
    measured at the consumer as for siding."""
    record = ctx.record_file(f"{mode.entry}-vertx")
    with ctx.sim(BEHAVIOUR, record, transport="http") as sim:
        got = pc.run_vertx(
            classpath,
            ctx.bootstrap,
            topic,
            sim.url,
            mode=mode.pc_mode,
            concurrency=CONCURRENCY,
            count=count,
        )
    received = first_receipts(read_records(record))
    if len(received) != count:
        raise pc.PeerUnavailable(f"consumer saw {len(received)} of {count} messages")
    return {
        "parallel_consumer_vertx_seconds": round(
            done_span_s(received.values(), planned_delay(BEHAVIOUR)), 3
        ),
        "parallel_consumer_vertx_seconds_own": round(got.seconds, 3),
        "parallel_consumer_vertx_seconds_with_start": round(got.total_seconds, 3),
    }


def _serial(ctx: BenchContext, topic: str, count: int) -> tuple[float, int, float]:
    """Serial consumer seconds for ``count`` (extrapolated from a window), messages, window."""
    record = ctx.record_file("pc-table-serial")
    window = max(3.0, SERIAL_WINDOW_S * min(1.0, ctx.scale * 4))
    with ctx.sim(BEHAVIOUR, record) as sim:
        done = run_serial(ctx.bootstrap, topic, sim.target, count=count, window_s=window)
    return (
        extrapolated_seconds(count, rate_per_s(read_records(record), planned_delay(BEHAVIOUR))),
        done.processed,
        window,
    )


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=500)
    topics: dict[int | None, str] = {}
    for keys in sorted({m.keys for m in MODES}, key=lambda k: k or 0):
        topics[keys] = ctx.topic(f"pc-k{keys or 0}")
        produce(ctx.bootstrap, topics[keys], count, keys=keys)
    # A serial consumer satisfies every ordering mode, so one measurement serves all four.
    serial_s, serial_n, serial_window = _serial(ctx, topics[None], count)
    try:
        classpath: str | None = pc.build()
        build_error = None
    except (pc.PeerUnavailable, OSError) as exc:
        classpath, build_error = None, str(exc)
    entries = []
    for mode in MODES:
        topic = topics[mode.keys]
        siding_s, siding_commit_s = _siding(ctx, topic, count, mode)
        peer: dict[str, object] = {}
        if classpath is None:
            peer = {"parallel_consumer_seconds": None, "parallel_consumer_error": build_error}
        else:
            try:
                got = pc.run(
                    classpath,
                    ctx.bootstrap,
                    topic,
                    mode=mode.pc_mode,
                    concurrency=CONCURRENCY,
                    count=count,
                    max_sleep_ms=MAX_SLEEP_MS,
                )
                peer = {
                    "parallel_consumer_seconds": round(got.seconds, 3),
                    "parallel_consumer_seconds_with_start": round(got.total_seconds, 3),
                }
            except (pc.PeerUnavailable, OSError) as exc:
                peer = {"parallel_consumer_seconds": None, "parallel_consumer_error": str(exc)}
        if mode.vertx:
            try:
                if classpath is None:
                    raise pc.PeerUnavailable(str(build_error))
                peer.update(_vertx(ctx, classpath, topic, count, mode))
            except Exception as exc:  # recorded, never made up
                peer.update(
                    {
                        "parallel_consumer_vertx_seconds": None,
                        "parallel_consumer_vertx_error": f"{type(exc).__name__}: {exc}",
                    }
                )
        entries.append(
            {
                "name": mode.entry,
                "messages": count,
                "siding_seconds": round(siding_s, 3),
                "siding_seconds_with_start": round(siding_commit_s, 3),
                "baselines": {
                    **peer,
                    "serial_consumer_seconds": round(serial_s, 1),
                    "serial_consumer_extrapolated": True,
                    "serial_consumer_measured_messages": serial_n,
                    "serial_consumer_window_s": serial_window,
                },
                "settings": {
                    "keys": mode.keys,
                    "concurrency": CONCURRENCY,
                    "processing_ms": [0, MAX_SLEEP_MS],
                    "siding_route": mode.route,
                    "parallel_consumer_vertx": (
                        "HTTP to the simulated consumer (0-5 ms), maxConcurrency 100"
                        if mode.vertx
                        else None
                    ),
                },
            }
        )
    return entries
