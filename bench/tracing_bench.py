"""Tracing's cost on the cost workload: CPU seconds of siding's own processes per 1,000
delivered messages (as ``bench/workloads/cost.py`` counts them: not the broker, the consumer
or the collector) with ``[tracing]`` off, on sampling 1 % of new traces, and on sampling all,
interleaved round by round so a machine's drift falls on every variant alike. The spans go to
a real OpenTelemetry Collector (``make setup`` builds it) on loopback.

    python -m bench.tracing_bench [--messages 20000] [--rounds 3]

Writes bench/results/tracing.json (every run, and each variant's median) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.workloads.cpu import CpuMeter, children_of
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.otel_collector import OtelCollector
from siding.devkit.sim_consumer import Behaviour, SimConsumerProcess, SimSettings
from siding.devkit.sim_produce import produce
from siding.pipeline.driver.session import build_session

RESULTS = Path(__file__).parent / "results" / "tracing.json"
VARIANTS: dict[str, float | None] = {"off": None, "on-1%": 0.01, "on-100%": 1.0}
WARM_UP = 5_000


def tracing_table(ratio: float | None, endpoint: str) -> str:
    """Pure: the ``[tracing]`` table of a variant ("" for off)."""
    if ratio is None:
        return ""
    return f'[tracing]\nenabled = true\nendpoint = "{endpoint}"\nsample_ratio = {ratio}\n'


@dataclass(frozen=True)
class Rig:
    """What every run shares: the broker, Spark, a scratch folder, the consumer, and the
    processes whose CPU is not siding's."""

    bootstrap: str
    spark: Any
    workdir: Path
    target: str
    exclude: frozenset[int]

    def route_run(self, topic: str, tracing: str) -> PipelineRun:
        name = f"{topic.removeprefix('bench-')}-{uuid.uuid4().hex[:4]}"
        route = {
            "name": name,
            "topic": topic,
            "group": f"{name}-group",
            "endpoint": f"grpc://{self.target}",
            "max_in_flight": 1000,
            "dlq_flood_min_batch": 1_000_000,
        }
        checkpoints = self.workdir / f"checkpoints-{name}"
        text = config_text(self.bootstrap, route, checkpoint_dir=checkpoints, trigger=None)
        return PipelineRun(parse_config(text + tracing), self.spark)

    def one_run(self, count: int, tracing: str) -> dict[str, float]:
        topic = f"bench-tracing-{uuid.uuid4().hex[:8]}"
        produce(self.bootstrap, topic, count)
        started, meter = time.monotonic(), CpuMeter(os.getpid(), set(self.exclude)).start()
        with self.route_run(topic, tracing) as run:
            run.wait_committed({0: count}, timeout_s=count / 50 + 120)
            meter.stop()
            wall = time.monotonic() - started
        return {
            "cpu_s_per_1000": round(meter.seconds / count * 1000, 3),
            "cpu_s": round(meter.seconds, 2),
            "wall_s": round(wall, 2),
        }


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Pure: each variant's median CPU per 1,000 and its change against ``off``."""
    medians = {
        v: statistics.median(r["cpu_s_per_1000"] for r in runs if r["variant"] == v)
        for v in VARIANTS
        if any(r["variant"] == v for r in runs)
    }
    off = medians.get("off")
    return {
        v: {
            "median_cpu_s_per_1000": round(m, 3),
            "vs_off_percent": round((m / off - 1) * 100, 1) if off else 0.0,
        }
        for v, m in medians.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="siding-tracing-bench-"))
    runs: list[dict[str, Any]] = []
    try:
        with EmbeddedKafka() as kafka, OtelCollector() as collector:
            spark = build_session("local[2]", app_name="siding-tracing-bench")
            before = children_of(os.getpid())
            settings = SimSettings(
                transport="grpc", behaviour=Behaviour(), record=str(workdir / "sim.csv")
            )
            with SimConsumerProcess(settings) as sim:
                # Not siding's: the broker, the collector, the consumer (started since).
                collector_pid = collector.process.pid if collector.process else 0
                started_since = children_of(os.getpid()) - before
                exclude = frozenset({kafka.pid or 0, collector_pid, *started_since})
                rig = Rig(kafka.bootstrap, spark, workdir, sim.target, exclude)
                # Untimed: a fresh JVM's and fresh workers' first costs, and tracing's imports.
                rig.one_run(WARM_UP, tracing_table(1.0, collector.endpoint))
                for round_no in range(args.rounds):
                    for variant, ratio in VARIANTS.items():
                        table = tracing_table(ratio, collector.endpoint)
                        got = rig.one_run(args.messages, table)
                        runs.append({"variant": variant, "round": round_no, **got})
                        print(f"[tracing-bench] {runs[-1]}", flush=True)
            spark.stop()
            spans = len(collector.spans())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "messages": args.messages,
        "rounds": args.rounds,
        "spans_received": spans,
        "runs": runs,
        "summary": summary(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("variant    median CPU s / 1,000 msgs   vs off")
    for variant, row in result["summary"].items():
        print(f"{variant:<10} {row['median_cpu_s_per_1000']:>24} {row['vs_off_percent']:>+8}%")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
