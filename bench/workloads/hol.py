"""Head-of-line blocking (Uber's billing example): 10 % of messages go to a slow provider (2 s),
the rest to a fast one (10 ms), produced at a steady rate. End-to-end latency of the fast ones,
and how many messages the consumer received more than once.

siding runs four variants: gRPC stream and HTTP webhooks, each with the benchmark's tuned route
(``TUNED_ROUTE``) and with the defaults (a route with only name, topic, group and endpoint, and
the config's default trigger); each with and without the slow 10 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.baselines.serial import run_serial
from bench.workloads.context import BenchContext, Transport, scaled
from bench.workloads.measure import delivery_summary, latencies_ms, percentile
from bench.workloads.traffic import Pushed, Siding, System, push, start_producer
from siding.devkit.sim_consumer import Behaviour, plan, read_records
from siding.model import delivery_id

MESSAGES = 3_000
RATE = 200.0
FAST_S, SLOW_S, SLOW_RATIO = 0.010, 2.0, 0.1
SERIAL_WINDOW_S = 20.0
DONE_TIMEOUT_S = 120.0
# The route the benchmark tunes: the main lane gives up on a message after its deadline and
# moves it to lane 1, where it has time. Change it here; every tuned variant follows.
# Until parking (docs/parking.md) the tuned route had a 250 ms main-lane deadline, so slow calls
# moved to lane 1 and were delivered twice; calls now outlive their batch instead, so the tuning
# keeps the default deadline and parks outliers after 20 ms of quiet.
TUNED_ROUTE: dict[str, object] = {
    "max_in_flight": 1000,
    "lanes": [{"delay": "0s", "deadline": "10s"}],
    "adaptive": {"enabled": False},
    "park": {"floor": "20ms"},
}
# siding's in-flight limit in both routes (the default max_in_flight is 1,000 too); the peers
# get the same.
IN_FLIGHT = 1000


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    transport: Transport
    tuned: bool

    def system(self) -> Siding:
        return Siding(f"siding_{self.name}", self.transport, TUNED_ROUTE if self.tuned else None)


VARIANTS = (
    Variant("grpc_tuned", "grpc", tuned=True),
    Variant("grpc_defaults", "grpc", tuned=False),
    Variant("http_tuned", "http", tuned=True),
    Variant("http_defaults", "http", tuned=False),
)


def behaviour(slow_ratio: float) -> Behaviour:
    return Behaviour(latency_s=(FAST_S, FAST_S), slow_ratio=slow_ratio, slow_latency_s=SLOW_S)


def fast_ids(b: Behaviour, topic: str, first: int, count: int) -> set[str]:
    ids = (delivery_id(topic, 0, offset) for offset in range(first, first + count))
    return {i for i in ids if plan(b, i, 1).delay_s < SLOW_S}


def summarise(pushed: Pushed, b: Behaviour, count: int, *, attempts_known: bool) -> dict[str, Any]:
    """One run's numbers: fast p50/p99 and what was delivered more than once."""
    summary = delivery_summary(
        pushed.records,
        fast=fast_ids(b, pushed.topic, 1, count),
        expected=pushed.expected,
        attempts_known=attempts_known,
    )
    return {**summary, "complete": pushed.complete, "seconds": round(pushed.seconds, 1)}


def measure_system(
    ctx: BenchContext, system: System, count: int, *, attempts_known: bool
) -> dict[str, Any]:
    """``system`` on the HOL traffic with and without slow messages."""
    out: dict[str, Any] = {"system": system.name, "transport": system.transport}
    for key, ratio in (("with_slow", SLOW_RATIO), ("without_slow", 0.0)):
        b = behaviour(ratio)
        pushed = push(
            ctx,
            system,
            label=f"hol-{system.name.replace('_', '-')}-{int(ratio * 100)}",
            behaviour=b,
            count=count,
            rate=RATE,
            done_timeout_s=DONE_TIMEOUT_S,
        )
        out[key] = summarise(pushed, b, count, attempts_known=attempts_known)
    return out


def _serial(ctx: BenchContext, count: int, window_s: float) -> list[float]:
    b = behaviour(SLOW_RATIO)
    topic = ctx.topic("hol-serial")
    ctx.create_topic(topic)
    record = ctx.record_file(topic)
    with ctx.sim(b, record) as sim:
        producer = start_producer(ctx, topic, count, RATE)
        run_serial(ctx.bootstrap, topic, sim.target, count=count, window_s=window_s)
        producer.join()
    return latencies_ms(read_records(record), fast_ids(b, topic, 0, count))


def settings() -> dict[str, Any]:
    return {
        "rate_msgs_per_s": RATE,
        "fast_ms": FAST_S * 1000,
        "slow_ms": SLOW_S * 1000,
        "slow_ratio": SLOW_RATIO,
        "siding_route": TUNED_ROUTE,
        "in_flight": IN_FLIGHT,
    }


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=400)
    variants: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        try:
            got = measure_system(ctx, variant.system(), count, attempts_known=True)
        except Exception as exc:  # one failed variant must not hide the others
            got = {"system": variant.system().name, "error": f"{type(exc).__name__}: {exc}"}
        variants[variant.name] = {
            **got,
            "route": "tuned" if variant.tuned else "defaults",
        }
    window = max(5.0, SERIAL_WINDOW_S * min(1.0, ctx.scale * 4))
    serial = _serial(ctx, count, window)
    tuned = variants["grpc_tuned"]
    with_slow, without = tuned.get("with_slow", {}), tuned.get("without_slow", {})
    entry: dict[str, Any] = {
        "name": "hol",
        "messages": count,
        # The gRPC stream with the tuned route, as this entry has always reported.
        "fast_p50_ms": with_slow.get("fast_p50_ms"),
        "fast_p99_ms": with_slow.get("fast_p99_ms"),
        "fast_p50_ms_without_slow": without.get("fast_p50_ms"),
        "fast_p99_ms_without_slow": without.get("fast_p99_ms"),
        "variants": variants,
        "baselines": {
            "serial_consumer_fast_p50_ms": round(percentile(serial, 50), 1),
            "serial_consumer_fast_p99_ms": round(percentile(serial, 99), 1),
            "serial_consumer_fast_messages": len(serial),
            # The serial consumer falls behind for good; its latency grows with the window.
            "serial_consumer_window_s": window,
        },
        "settings": settings(),
    }
    failed = [f"{name}: {v['error']}" for name, v in variants.items() if "error" in v]
    if failed:
        entry["error"] = "; ".join(failed)
    return [entry]
