"""``make bench``: every workload against siding and its baselines, one broker, one run.

    python -m bench.run [--only NAME ...]        (SIDING_BENCH_SCALE=0.1 for a quick run)

Writes bench/results/latest.json, a timestamped copy and latest.md; see bench/README.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report
from bench.workloads import (
    cost,
    crash_pill,
    hol,
    hol_peers,
    key_retry,
    latency_curve,
    partition_scalability,
    pc_table,
    poison_pills,
    spark_floor,
    throughput,
)
from bench.workloads.context import BenchContext, scale_from_env
from bench.workloads.cpu import CpuMeter, SystemPeaks
from siding.devkit.broker import EmbeddedKafka
from siding.pipeline.driver.session import build_session

Workload = Callable[[BenchContext], list[dict[str, Any]]]
RSS_SAMPLE_S = 0.5


def workloads(broker_pid: int) -> dict[str, Workload]:
    return {
        "partition_scalability": partition_scalability.run,
        "pc_table": pc_table.run,
        "hol": hol.run,
        "spark_floor": spark_floor.run,
        "hol_peers": hol_peers.run,
        "latency_curve": latency_curve.run,
        "poison_pills": poison_pills.run,
        "crash_pill": crash_pill.run,
        "key_retry": key_retry.run,
        "throughput": lambda ctx: throughput.run(ctx, broker_pid),
        "cost": lambda ctx: cost.run(ctx, broker_pid),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="siding against its baselines")
    parser.add_argument("--only", nargs="*", help="run only these workloads")
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    scale, started = scale_from_env(), time.time()
    workdir = Path(tempfile.mkdtemp(prefix="siding-bench-"))
    entries: list[dict[str, Any]] = []
    try:
        with EmbeddedKafka() as kafka:
            spark = build_session("local[2]", app_name="siding-bench")
            ctx = BenchContext(kafka.bootstrap, spark, workdir, scale)
            for name, workload in workloads(kafka.pid or 0).items():
                if args.only and name not in args.only:
                    continue
                print(f"[bench] {name} ...", flush=True)
                began = time.monotonic()
                # the peak RSS of each system's process tree over the workload (the broker not)
                peaks = SystemPeaks(os.getpid())
                meter = CpuMeter(os.getpid(), {kafka.pid or 0}, RSS_SAMPLE_S, on_sample=peaks)
                try:
                    with meter:
                        got = workload(ctx)
                except Exception as exc:  # one failed workload must not hide the others
                    traceback.print_exc()
                    got = [
                        {"name": name, "messages": None, "error": f"{type(exc).__name__}: {exc}"}
                    ]
                for entry in got:
                    entry["bench_seconds"] = round(time.monotonic() - began, 1)
                    entry["peak_rss_mb"] = peaks.report()
                    print(f"[bench]   {entry}", flush=True)
                entries += got
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    command = "make bench"
    if args.only:
        command = "python -m bench.run --only " + " ".join(args.only)
    result = report.build_report(report.machine(), entries, scale, started, command)
    paths = report.write(result, args.out)
    print(report.markdown(result))
    print(f"written: {', '.join(str(p) for p in paths)}; took {time.time() - started:.0f}s")
    return 1 if any("error" in e for e in entries) else 0


if __name__ == "__main__":
    sys.exit(main())
