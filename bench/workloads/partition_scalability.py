"""Uber's example: 1 partition, a consumer that takes 1 s per message, max_in_flight 1,000.
siding's throughput against the bound max_in_flight / latency and the plain serial consumer."""

from __future__ import annotations

from typing import Any

from bench.baselines.serial import run_serial
from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import planned_delay, rate_per_s, ratio
from siding.devkit.sim_consumer import Behaviour, read_records
from siding.devkit.sim_produce import produce

LATENCY_S = 1.0
MAX_IN_FLIGHT = 1000
MESSAGES = 20_000
SERIAL_WINDOW_S = 15.0


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=2 * MAX_IN_FLIGHT)
    behaviour = Behaviour(latency_s=(LATENCY_S, LATENCY_S))
    topic = ctx.topic("scalability")
    produce(ctx.bootstrap, topic, count)
    record = ctx.record_file("scalability-siding")
    with ctx.sim(behaviour, record) as sim:
        route = {"max_in_flight": MAX_IN_FLIGHT, "deadline": "30s", "adaptive": {"enabled": False}}
        with ctx.pipeline(topic, sim.target, **route) as pipeline:
            pipeline.wait_committed({0: count}, timeout_s=count / 100 + 120)
    siding = rate_per_s(read_records(record), planned_delay(behaviour))

    serial_record = ctx.record_file("scalability-serial")
    window = max(5.0, SERIAL_WINDOW_S * min(1.0, ctx.scale * 4))
    with ctx.sim(behaviour, serial_record) as sim:
        serial_run = run_serial(ctx.bootstrap, topic, sim.target, count=count, window_s=window)
    serial = rate_per_s(read_records(serial_record), planned_delay(behaviour))
    bound = MAX_IN_FLIGHT / LATENCY_S
    return [
        {
            "name": "partition_scalability",
            "messages": count,
            "siding_msgs_per_s": round(siding, 1),
            "bound_msgs_per_s": bound,
            "fraction_of_bound": ratio(siding, bound),
            "ratio_to_serial": ratio(siding, serial),
            "baselines": {
                "serial_consumer_msgs_per_s": round(serial, 3),
                "serial_consumer_messages": serial_run.processed,
                "serial_consumer_window_s": round(serial_run.seconds, 1),
            },
            "settings": {"latency_s": LATENCY_S, "max_in_flight": MAX_IN_FLIGHT, "partitions": 1},
        }
    ]
