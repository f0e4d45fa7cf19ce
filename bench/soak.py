"""The memory soak (issue 29, item 5): siding's process tree held under steady traffic.

    python -m bench.soak [--messages 180000] [--rate 300] [--partitions 4] [--slow 0.02]
                         [--poison 0.005] [--transport grpc|http] [--out bench/results]

A real ``siding run`` (a route with only name, topic, group and endpoint: the defaults) reads a
topic of ``--partitions`` partitions while ``--messages`` are produced at ``--rate`` msg/s (10
minutes with the defaults) for a simulated consumer answering in 5-15 ms, ``--slow`` of them in
2 s and ``--poison`` DEAD (to the DLQ). The tree of ``siding run`` (the driver, Spark's JVM, its
Python workers) is sampled every 0.5 s from /proc (``workloads.cpu.CpuMeter``, the sampler the
CPU figures use); every 15 s the JVM's heap (``jstat -gc``) and each process's RSS; a class
histogram of the JVM (``jcmd GC.class_histogram``, a full GC) as the traffic starts (not
inside the judged window: a full GC there shrinks the committed heap under the window's first
samples) and at its end. At the end: nothing lost (every message ACKed by the consumer or in
the DLQ), nothing delivered twice, and the verdict: RSS flat (under 5 % growth) over the last
two thirds of the traffic. Writes ``bench/results/soak-<UTC time>.json`` with the series.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.workloads.cpu import CpuMeter, RssSample, read_stats, steady, tree
from bench.workloads.memory import (
    flatness,
    grown_classes,
    last_two_thirds,
    parse_class_histogram,
    parse_jstat_gc,
    parse_pss_kb,
)
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.process import start_siding_run
from siding.devkit.sim_consumer import (
    Behaviour,
    Fate,
    SimConsumerProcess,
    SimSettings,
    plan,
    read_records,
)
from siding.devkit.sim_produce import new_producer, produce
from siding.devkit.wait import wait_until
from siding.kafka.reader import watermarks_of
from siding.model import delivery_id

RESULTS = Path(__file__).parent / "results"
LATENCY_S = (0.005, 0.015)
SAMPLE_S = 0.5
DETAIL_S = 15.0
START_TIMEOUT_S = 300.0
MB = 1024 * 1024
ROOT_KIND = "driver (siding run)"


def _tool(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)}: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def _jvm_pid(root: int) -> int | None:
    java = [p.pid for p in tree(read_stats(), root, ()) if p.name == "java"]
    return java[0] if java else None


def _pss_mb(pid: int) -> float | None:
    """The process's PSS (MB), or None when it ended or the kernel does not say."""
    try:
        return round(parse_pss_kb(Path(f"/proc/{pid}/smaps_rollup").read_text()) / 1024, 1)
    except (OSError, ValueError):
        return None


def _detail(root: int, jvm: int | None, since: float) -> dict[str, Any]:
    """Each process's RSS and PSS (MB) and the JVM's heap now."""
    procs = tree(read_stats(), root, ())
    pss = {f"{p.pid} {p.name}": _pss_mb(p.pid) for p in procs}
    row: dict[str, Any] = {
        "t_s": round(time.monotonic() - since, 1),
        "rss_mb_by_pid": {f"{p.pid} {p.name}": round(p.rss / MB, 1) for p in procs},
        "pss_mb_by_pid": pss,
        "pss_mb": round(sum(v for v in pss.values() if v is not None), 1),
    }
    if jvm is not None:
        try:
            row["jvm_heap"] = asdict(parse_jstat_gc(_tool("jstat", "-gc", str(jvm))))
        except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
            row["jvm_heap_error"] = str(exc)
    return row


def _histogram(jvm: int | None) -> dict[str, tuple[int, int]]:
    if jvm is None:
        return {}
    try:
        return parse_class_histogram(_tool("jcmd", str(jvm), "GC.class_histogram"))
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return {}


def _compact(sample: RssSample, since: float) -> list[float]:
    """[seconds, total MB, driver MB, JVM MB, Python workers MB, processes]."""
    k = sample.by_kind
    return [
        round(sample.at - since, 1),
        round(sample.total / MB, 1),
        round(k.get(ROOT_KIND, 0) / MB, 1),
        round(k.get("Spark JVM", 0) / MB, 1),
        round(k.get("Spark Python workers", 0) / MB, 1),
        len(sample.by_pid),
    ]


def _watch(
    producing: threading.Thread,
    root: int,
    jvm: int | None,
    began: float,
    *,
    check: Callable[[], None],
) -> list[dict[str, Any]]:
    """While the traffic runs: details every ``DETAIL_S``."""
    details = [_detail(root, jvm, began)]
    while producing.is_alive():
        producing.join(DETAIL_S)
        check()
        details.append(_detail(root, jvm, began))
    return details


def _config(
    work: Path, bootstrap: str, topic: str, endpoint: str, spark_conf: dict[str, str]
) -> Path:
    route = {"name": "soak", "topic": topic, "group": "soak-group", "endpoint": endpoint}
    path = work / "siding.toml"
    text = config_text(bootstrap, route, checkpoint_dir=work / "ckpt", trigger=None)
    # [spark] master left out too: the config's default (local[*]), as a new user starts
    lines = [line for line in text.splitlines(True) if line.split(" ")[0] != "master"]
    if spark_conf:  # a [spark.conf] table, before the next one ([control])
        at = lines.index("[control]\n")
        table = ["[spark.conf]\n"] + [
            f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in spark_conf.items()
        ]
        lines[at:at] = table
    path.write_text("".join(lines))
    return path


def spark_setting(text: str) -> tuple[str, str]:
    """``--spark-conf KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def soak(args: argparse.Namespace) -> dict[str, Any]:
    behaviour = Behaviour(
        latency_s=LATENCY_S, slow_ratio=args.slow, dead_ratio=args.poison, seed=29
    )
    topic = "soak"
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="siding-soak-")))
        broker = stack.enter_context(EmbeddedKafka())
        record = work / "received.csv"
        sim = SimConsumerProcess(
            SimSettings(transport=args.transport, behaviour=behaviour, record=str(record))
        ).start()
        stack.callback(sim.stop)
        endpoint = f"grpc://{sim.target}" if args.transport == "grpc" else f"{sim.url}"
        config = _config(work, broker.bootstrap, topic, endpoint, dict(args.spark_conf))
        watcher = PipelineRun(parse_config(config.read_text()))
        producer = new_producer(broker.bootstrap)
        produce(broker.bootstrap, topic, 1, partitions=args.partitions, producer=producer)
        log = work / "siding.log"
        proc = start_siding_run(config, log)

        def check() -> None:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-20:]
                raise RuntimeError(f"siding run exited {proc.returncode}: " + "\n".join(tail))

        def stop() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        stack.callback(stop)
        began = time.monotonic()
        meter = CpuMeter(
            proc.pid, (), interval_s=SAMPLE_S, root_kind=ROOT_KIND, keep_series=True
        ).start()
        stack.callback(meter.stop)
        wait_until(
            lambda: len(read_records(record)) >= 1,
            timeout_s=START_TIMEOUT_S,
            what="the warm-up message delivered",
            check=check,
        )
        jvm = _jvm_pid(proc.pid)
        producing = threading.Thread(
            target=produce,
            args=(broker.bootstrap, topic, args.messages - 1),
            kwargs={
                "rate": args.rate,
                "partitions": args.partitions,
                "producer": producer,
                "start_seq": 1,
            },
            daemon=True,
        )
        histogram_start = _histogram(jvm)  # before the traffic: its full GC is not in the window
        traffic_from, cpu_from = time.monotonic() - began, meter.by_kind
        producing.start()
        details = _watch(producing, proc.pid, jvm, began, check=check)
        traffic_to, cpu_to = time.monotonic() - began, meter.by_kind
        ends = watermarks_of(watcher.client_conf, topic)
        watcher.wait_committed(ends, timeout_s=600)
        drained_at = time.monotonic() - began
        time.sleep(3)  # late redeliveries are counted too
        details.append(_detail(proc.pid, jvm, began))
        histogram_end = _histogram(jvm)
        meter.stop()
        series = [_compact(s, began) for s in meter.rss_series]
        letters = watcher.dead_letters()
        deliveries = read_records(record)  # before the folder holding it is removed
    if not deliveries:
        raise RuntimeError("the simulated consumer recorded no delivery")
    return _result(
        args,
        behaviour,
        outcome={
            "deliveries": deliveries,
            "ends": ends,
            "letters": letters,
            "traffic": (traffic_from, traffic_to),
            "drained_at": drained_at,
            "series": series,
            "details": details,
            "histograms": (histogram_start, histogram_end),
            "cpu": (cpu_from, cpu_to),
        },
    )


def _result(
    args: argparse.Namespace, behaviour: Behaviour, outcome: dict[str, Any]
) -> dict[str, Any]:
    """The soak's entry: the checks (lost, twice, DLQ), the RSS verdict, the series."""
    topic = "soak"
    deliveries, ends, letters = outcome["deliveries"], outcome["ends"], outcome["letters"]
    traffic_from, traffic_to = outcome["traffic"]
    series, details = outcome["series"], outcome["details"]
    histogram_start, histogram_end = outcome["histograms"]
    drained_at = outcome["drained_at"]
    cpu_from, cpu_to = outcome["cpu"]
    cpu = {k: round(v - cpu_from.get(k, 0.0), 1) for k, v in cpu_to.items()}
    times = Counter(r.delivery_id for r in deliveries)
    expected = {delivery_id(topic, p, o) for p, end in ends.items() for o in range(end)}
    poison = {i for i in expected if plan(behaviour, i, 1).fate is Fate.DEAD}
    in_dlq = {x.story.origin.delivery_id for x in letters if x.story is not None}
    acked = {i for i in times if i in expected and i not in poison}
    window = last_two_thirds((traffic_from, traffic_to))
    verdict = flatness([(s[0], s[1]) for s in series], window)
    # a peak holds for the median of three samples (cpu.steady: a fork of the JVM is no peak)
    held = [steady(series[max(0, i - 2) : i + 1], lambda r: r[1]) for i in range(len(series))]
    peak = max(held, key=lambda s: s[1])
    return {
        "name": "soak",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared",
        "load_average_at_end": list(os.getloadavg()),
        "messages": sum(ends.values()),
        "traffic_s": [round(traffic_from, 1), round(traffic_to, 1)],
        "drained_at_s": round(drained_at, 1),
        "lost": len(expected - acked - (in_dlq & poison)),
        "delivered_more_than_once": sum(1 for i, n in times.items() if n > 1 and i in expected),
        "poison": len(poison),
        "dlq_records": len(letters),
        "dlq_exact": in_dlq == poison and len(letters) == len(poison),
        "rss_mb_start_of_traffic": next((s[1] for s in series if s[0] >= traffic_from), None),
        "rss_mb_peak": peak[1],
        "rss_mb_peak_single_sample": max(s[1] for s in series),
        "rss_mb_at_peak_by_process": {
            "driver": peak[2],
            "Spark JVM": peak[3],
            "Spark Python workers": peak[4],
        },
        "last_two_thirds": asdict(verdict),
        # the memory the tree holds, shared pages counted once (details every DETAIL_S)
        "pss_mb_at_end": details[-1].get("pss_mb") if details else None,
        "pss_last_two_thirds": _pss_flatness(details, window),
        # the tree's CPU seconds while the traffic ran, by kind of process (GC included)
        "cpu_s_during_traffic": {**cpu, "total": round(sum(cpu.values()), 1)},
        "target": "RSS flat (under 5 % growth) over the last two thirds of the traffic",
        "target_met": verdict.flat,
        "jvm_classes_grown_during_traffic": grown_classes(histogram_start, histogram_end),
        "settings": {
            "rate_msgs_per_s": args.rate,
            "partitions": args.partitions,
            "slow_ratio": args.slow,
            "slow_s": behaviour.slow_latency_s,
            "poison_ratio": args.poison,
            "latency_ms": [x * 1000 for x in LATENCY_S],
            "transport": args.transport,
            "spark_conf": dict(args.spark_conf),
            "route": "defaults (name, topic, group, endpoint; the config's default trigger)",
            "master": "the config's default (local[*])",
            "sampling": f"/proc every {SAMPLE_S:g} s (RSS summed over the tree's processes);"
            f" detail (per process RSS and PSS, jstat -gc) every {DETAIL_S:g} s",
        },
        "series_columns": ["t_s", "total_mb", "driver_mb", "jvm_mb", "workers_mb", "processes"],
        "series": series,
        "details": details,
    }


def _pss_flatness(
    details: list[dict[str, Any]], window: tuple[float, float]
) -> dict[str, Any] | None:
    """The flatness verdict on the details' PSS totals (one every DETAIL_S), or None."""
    points = [(d["t_s"], d["pss_mb"]) for d in details if d.get("pss_mb")]
    try:
        return asdict(flatness(points, window, step_s=DETAIL_S * 2))
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=180_000)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--slow", type=float, default=0.02, help="share that takes 2 s")
    parser.add_argument("--poison", type=float, default=0.005, help="share answered DEAD")
    parser.add_argument("--transport", choices=("grpc", "http"), default="grpc")
    parser.add_argument(
        "--spark-conf",
        type=spark_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [spark.conf] setting of the route (for example spark.driver.memory=768m)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = soak(args)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"soak-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    summary = {k: v for k, v in result.items() if k not in ("series", "details")}
    print(json.dumps(summary, indent=2))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
