"""Cost: CPU seconds of siding's own processes (this Python driver, Spark's JVM, its Python
workers; not the broker, not the consumer service) per 1,000 delivered messages, against the
transport floor from bench/results/transport.json (gRPC stream client CPU per message)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from bench import transport_bench
from bench.workloads.context import BenchContext, scaled
from bench.workloads.cpu import CpuMeter, children_of
from bench.workloads.measure import first_receipts
from siding.devkit.sim_consumer import Behaviour, read_records
from siding.devkit.sim_produce import produce

MESSAGES = 20_000
WARM_UP = 5_000
FLOOR_TRANSPORT = "grpc (defaults)"  # the transport a gRPC route gets by default


def floor_s_per_1000(path: Path = transport_bench.RESULTS) -> float:
    def floor_us() -> float | None:
        runs = json.loads(path.read_text())["runs"] if path.exists() else []
        found = [r["client_cpu_us_per_msg"] for r in runs if r["transport"] == FLOOR_TRANSPORT]
        return float(found[0]) if found else None

    us = floor_us()
    if us is None:  # missing, or written before the row existed
        transport_bench.main(["--out", str(path)])
        us = floor_us()
    assert us is not None, f"{path} has no {FLOOR_TRANSPORT!r} row"
    return us * 1000 / 1e6


def warm_up(ctx: BenchContext, target: str) -> None:
    """An untimed route first, so the measure does not count what a fresh JVM and fresh Python
    workers pay once (JIT, imports compiled from pyspark's zip): alone or last in ``make
    bench``, the workload then measures the same thing."""
    topic = ctx.topic("cost-warm-up")
    produce(ctx.bootstrap, topic, WARM_UP)
    with ctx.pipeline(topic, target, max_in_flight=1000) as pipeline:
        pipeline.wait_committed({0: WARM_UP}, timeout_s=120)


def run(ctx: BenchContext, broker_pid: int) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=2000)
    floor = floor_s_per_1000()
    topic = ctx.topic("cost")
    produce(ctx.bootstrap, topic, count)
    record = ctx.record_file(topic)
    before_sim = children_of(os.getpid())
    with ctx.sim(Behaviour(), record) as sim:
        warm_up(ctx, sim.target)
        # the consumer service is the only process the bench started since
        exclude = {broker_pid} | (children_of(os.getpid()) - before_sim)
        started, meter = time.monotonic(), CpuMeter(os.getpid(), exclude).start()
        with ctx.pipeline(topic, sim.target, max_in_flight=1000) as pipeline:
            # from the query's start to the last commit (its stop is not counted)
            pipeline.wait_committed({0: count}, timeout_s=count / 50 + 120)
            meter.stop()
            wall = time.monotonic() - started
    used = meter.seconds
    measured = (r for r in read_records(record) if r.delivery_id.startswith(f"{topic}/"))
    delivered = len(first_receipts(list(measured)))
    per_1000 = used / delivered * 1000
    return [
        {
            "name": "cost",
            "messages": count,
            "cpu_s_per_1000": round(per_1000, 3),
            "floor_cpu_s_per_1000": round(floor, 3),
            "ratio_to_floor": round(per_1000 / floor, 2),
            "cpu_s": round(used, 2),
            "cpu_s_by_process": {k: round(v, 2) for k, v in sorted(meter.by_kind.items())},
            "wall_s": round(wall, 2),
            "delivered": delivered,
            "settings": {"floor_transport": FLOOR_TRANSPORT, "max_in_flight": 1000},
        }
    ]
