"""The one-partition backlog drain of bench/workloads/throughput.py (20,000 messages, a 10 ms gRPC
consumer on the same machine), siding's defaults route with three adaptive settings, interleaved
in one process (one broker, one Spark session, warmed up first):

- off: the default (AIMD, no latency limit);
- latency: ``adaptive.latency = true`` (the gradient);
- latency_lag: the same with ``discount_loop_lag = true`` (the experiment).

    PYTHONPATH=. python bench/results/stop-39/gradient3-lag/ab.py ROUNDS OUT.json [MESSAGES]

Each task's adaptive limit at the end of its batch is read from the driver's DEBUG batch log.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.workloads import throughput
from bench.workloads.context import BenchContext
from bench.workloads.traffic import Siding
from siding.devkit.broker import EmbeddedKafka
from siding.pipeline.driver.session import build_session

VARIANTS = {
    "off": {"adaptive": {"enabled": True}},
    "latency": {"adaptive": {"latency": True}},
    "latency_lag": {"adaptive": {"latency": True, "discount_loop_lag": True}},
}
LIMIT = re.compile(r"max (\d+) in flight \(limit (\d+) at the end\)")


class Limits(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[int] = []
        self.peaks: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = LIMIT.search(record.getMessage())
        if found:
            self.peaks.append(int(found.group(1)))
            self.seen.append(int(found.group(2)))


def main() -> int:
    rounds, out = int(sys.argv[1]), Path(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else throughput.MESSAGES
    logging.basicConfig(level=logging.WARNING)
    limits = Limits()
    batches = logging.getLogger("siding.batches")
    batches.setLevel(logging.DEBUG)
    batches.addHandler(limits)
    workdir = Path(tempfile.mkdtemp(prefix="siding-ab-"))
    runs: list[dict[str, Any]] = []
    try:
        with EmbeddedKafka() as kafka:
            spark = build_session("local[2]", app_name="siding-ab")
            ctx = BenchContext(kafka.bootstrap, spark, workdir, 1.0)
            throughput.warm_up(ctx)
            for n in range(rounds):
                for name, route in VARIANTS.items():
                    limits.seen.clear()
                    limits.peaks.clear()
                    system = Siding(f"siding_grpc_{name}", "grpc", route)
                    got = throughput.measure(ctx, system, 1, count, kafka.pid or 0)
                    got |= {
                        "variant": name,
                        "round": n,
                        "task_limits": list(limits.seen),
                        "task_max_in_flight": list(limits.peaks),
                        "task_limit_median": (
                            statistics.median(limits.seen) if limits.seen else None
                        ),
                    }
                    print(
                        f"[ab] round {n} {name}: {got['msgs_per_s']} msg/s, cpu/1k"
                        f" {got['cpu_s_per_1000']}, limits {limits.seen},"
                        f" max in flight {limits.peaks}",
                        flush=True,
                    )
                    runs.append(got)
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.write_text(json.dumps(runs, indent=1) + "\n")
    for name in VARIANTS:
        rates = [r["msgs_per_s"] for r in runs if r["variant"] == name]
        print(f"[ab] {name}: msg/s {rates}, median {statistics.median(rates)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
