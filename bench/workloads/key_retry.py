"""Key mode with retries (issue 19): 3,000 messages over 30 keys at 100 msg/s (a message per key
every 0.3 s), every tenth message of a key answered RETRY on its first attempt, 5-17 ms per call.

siding runs the quickstart's lanes in key mode; Parallel Consumer runs KEY order with its own
retries and the same delay as siding's lane 1, both over HTTP to the same simulated consumer.
Each also runs the same traffic without failures: the targets compare the two.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.peers import parallel_consumer as pc
from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import first_receipts, latencies_ms, rounded_percentile
from bench.workloads.traffic import ParallelConsumerRetry, Pushed, Siding, System, push
from siding.devkit.keycheck import order_violations
from siding.devkit.sim_consumer import Behaviour, fails_first_attempt
from siding.model import delivery_id

MESSAGES = 3_000
KEYS = 30
RATE = 100.0
EVERY = 10
LATENCY_S = (0.005, 0.017)
# Lane 1's delay and Parallel Consumer's retry delay: the quickstart's 2 s unless
# SIDING_BENCH_KEY_RETRY_DELAY_S says otherwise (a second point of the same workload).
RETRY_DELAY_S = float(os.environ.get("SIDING_BENCH_KEY_RETRY_DELAY_S", "2"))
# The quickstart route (examples/quickstart.toml) in key mode.
ROUTE: dict[str, object] = {
    "ordering": "key",
    "max_in_flight": 200,
    "lanes": [
        {"delay": f"{round(RETRY_DELAY_S * 1000)}ms", "deadline": "10s"},
        {"delay": "10s", "deadline": "30s"},
    ],
}
CONCURRENCY = 200
DONE_TIMEOUT_S = 240.0


def behaviour(failing: bool) -> Behaviour:
    return Behaviour(latency_s=LATENCY_S, retry_every=EVERY if failing else 0, keys=KEYS)


def failing_ids(b: Behaviour, topic: str, count: int) -> set[str]:
    """The measured messages the consumer fails once (offsets 1..count carry seq 1..count)."""
    return {delivery_id(topic, 0, s) for s in range(1, count + 1) if fails_first_attempt(b, s, 1)}


def summarise(pushed: Pushed, b: Behaviour, count: int) -> dict[str, Any]:
    """Never-failed messages: latency, lane and attempt of delivery; order per key."""
    failing = failing_ids(b, pushed.topic, count)
    never = pushed.expected - failing
    records = [r for r in pushed.records if r.delivery_id in pushed.expected]
    firsts = [r for i, r in first_receipts(records).items() if i in never]
    lanes = [r.lane for r in firsts if r.lane is not None]
    lat = latencies_ms(records, never)
    return {
        "never_failed": len(never),
        "failed_once": len(failing),
        "delivered": len(first_receipts(records)),
        "complete": pushed.complete,
        "never_failed_p50_ms": rounded_percentile(lat, 50),
        "never_failed_p99_ms": rounded_percentile(lat, 99),
        # None when the system does not say which lane it delivers from (the peer)
        "never_failed_from_a_lane": sum(1 for lane in lanes if lane > 0) if lanes else None,
        "never_failed_attempts": dict(
            sorted(Counter(r.attempt for r in records if r.delivery_id in never).items())
        ),
        "order_violations": len(order_violations(records, b, KEYS)),
        "seconds": round(pushed.seconds, 1),
    }


def targets(with_f: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    """Issue 19's targets: never-failed p50 within 1.5x and p99 within the retry delay plus 2x
    of the same traffic without failures; no order violation."""
    p50, p50_0 = with_f.get("never_failed_p50_ms"), without.get("never_failed_p50_ms")
    p99, p99_0 = with_f.get("never_failed_p99_ms"), without.get("never_failed_p99_ms")
    if p50 is None or p50_0 is None or p99 is None or p99_0 is None:
        return {"met": None}
    p99_bound = RETRY_DELAY_S * 1000 + 2 * p99_0
    out = {
        "p50_ratio": round(p50 / p50_0, 2) if p50_0 else None,
        "p50_met": p50 <= 1.5 * p50_0,
        "p99_bound_ms": round(p99_bound, 1),
        "p99_met": p99 <= p99_bound,
        "order_met": with_f.get("order_violations") == 0,
    }
    out["met"] = out["p50_met"] and out["p99_met"] and out["order_met"]
    return out


def measure(ctx: BenchContext, system: System, count: int) -> dict[str, Any]:
    out: dict[str, Any] = {"system": system.name}
    for label, failing in (("with_failures", True), ("without_failures", False)):
        b = behaviour(failing)
        pushed = push(
            ctx,
            system,
            label=f"keyretry-{system.name.replace('_', '-')}-{int(failing)}",
            behaviour=b,
            count=count,
            rate=RATE,
            done_timeout_s=DONE_TIMEOUT_S,
            keys=KEYS,
        )
        out[label] = summarise(pushed, b, count)
    out["targets"] = targets(out["with_failures"], out["without_failures"])
    return out


def systems() -> dict[str, Callable[[], System]]:
    return {
        "siding": lambda: Siding("siding_key_http", "http", ROUTE),
        "parallel_consumer": lambda: ParallelConsumerRetry(pc.build(), CONCURRENCY, RETRY_DELAY_S),
    }


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=600)
    entry: dict[str, Any] = {"name": "key_retry", "messages": count}
    for name, make in systems().items():
        try:
            entry[name] = measure(ctx, make(), count)
        except Exception as exc:  # recorded, never made up
            entry[name] = {"error": f"{type(exc).__name__}: {exc}"}
    entry["settings"] = {
        "keys": KEYS,
        "rate_msgs_per_s": RATE,
        "fails": f"RETRY on the first attempt of every {EVERY}th message of a key",
        "consumer_ms": [LATENCY_S[0] * 1000, LATENCY_S[1] * 1000],
        "retry_delay_s": RETRY_DELAY_S,
        "siding_route": ROUTE,
        "parallel_consumer": f"KEY, maxConcurrency {CONCURRENCY}, retry delay {RETRY_DELAY_S}s,"
        " blocking HTTP to the simulated consumer",
    }
    failed = [f"{n}: {entry[n]['error']}" for n in systems() if "error" in entry[n]]
    if failed:
        entry["error"] = "; ".join(failed)
    return [entry]
