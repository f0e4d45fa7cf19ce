"""Head-of-line blocking (Uber's billing example): 10 % of messages go to a slow provider (2 s),
the rest to a fast one (10 ms), produced at a steady rate. End-to-end latency of the fast ones."""

from __future__ import annotations

import threading
from typing import Any

from bench.baselines.serial import run_serial
from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import latencies_ms, percentile
from siding.devkit.sim_consumer import Behaviour, plan, read_records
from siding.devkit.sim_produce import produce
from siding.model import delivery_id

MESSAGES = 3_000
RATE = 200.0
FAST_S, SLOW_S, SLOW_RATIO = 0.010, 2.0, 0.1
SERIAL_WINDOW_S = 20.0
# The main lane gives up on a message after DEADLINE and moves it to lane 1, where it has time.
ROUTE: dict[str, object] = {
    "max_in_flight": 1000,
    "deadline": "250ms",
    "lanes": [{"delay": "0s", "deadline": "10s"}],
    "adaptive": {"enabled": False},
}


def behaviour(slow_ratio: float) -> Behaviour:
    return Behaviour(latency_s=(FAST_S, FAST_S), slow_ratio=slow_ratio, slow_latency_s=SLOW_S)


def fast_ids(b: Behaviour, topic: str, first: int, count: int) -> set[str]:
    ids = (delivery_id(topic, 0, offset) for offset in range(first, first + count))
    return {i for i in ids if plan(b, i, 1).delay_s < SLOW_S}


def _producer(ctx: BenchContext, topic: str, count: int) -> threading.Thread:
    thread = threading.Thread(
        target=produce,
        args=(ctx.bootstrap, topic, count),
        kwargs={"rate": RATE, "start_seq": 1},
        daemon=True,
    )
    thread.start()
    return thread


def _siding(ctx: BenchContext, count: int, slow_ratio: float) -> list[float]:
    """Fast messages' latencies (ms); the pipeline is running before traffic starts."""
    b = behaviour(slow_ratio)
    topic = ctx.topic(f"hol-{int(slow_ratio * 100)}")
    produce(ctx.bootstrap, topic, 1)  # one warm-up message, left out of the numbers
    record = ctx.record_file(topic)
    with ctx.sim(b, record) as sim, ctx.pipeline(topic, sim.target, **ROUTE) as pipeline:
        pipeline.wait_committed({0: 1}, timeout_s=120)
        _producer(ctx, topic, count).join()
        pipeline.wait_committed({0: count + 1}, timeout_s=120)
    return latencies_ms(read_records(record), fast_ids(b, topic, 1, count))


def _serial(ctx: BenchContext, count: int, window_s: float) -> list[float]:
    b = behaviour(SLOW_RATIO)
    topic = ctx.topic("hol-serial")
    ctx.create_topic(topic)
    record = ctx.record_file(topic)
    with ctx.sim(b, record) as sim:
        producer = _producer(ctx, topic, count)
        run_serial(ctx.bootstrap, topic, sim.target, count=count, window_s=window_s)
        producer.join()
    return latencies_ms(read_records(record), fast_ids(b, topic, 0, count))


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=400)
    with_slow = _siding(ctx, count, SLOW_RATIO)
    without = _siding(ctx, count, 0.0)
    window = max(5.0, SERIAL_WINDOW_S * min(1.0, ctx.scale * 4))
    serial = _serial(ctx, count, window)
    return [
        {
            "name": "hol",
            "messages": count,
            "fast_p50_ms": round(percentile(with_slow, 50), 1),
            "fast_p99_ms": round(percentile(with_slow, 99), 1),
            "fast_p50_ms_without_slow": round(percentile(without, 50), 1),
            "fast_p99_ms_without_slow": round(percentile(without, 99), 1),
            "baselines": {
                "serial_consumer_fast_p50_ms": round(percentile(serial, 50), 1),
                "serial_consumer_fast_p99_ms": round(percentile(serial, 99), 1),
                "serial_consumer_fast_messages": len(serial),
                # The serial consumer falls behind for good; its latency grows with the window.
                "serial_consumer_window_s": window,
            },
            "settings": {
                "rate_msgs_per_s": RATE,
                "fast_ms": FAST_S * 1000,
                "slow_ms": SLOW_S * 1000,
                "slow_ratio": SLOW_RATIO,
                "siding_route": ROUTE,
            },
        }
    ]
