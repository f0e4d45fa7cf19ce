"""Probe (not committed): the cost workload's shape, with the Python processes Spark starts
noted per phase (warm-up route, measured route): pid, when first seen, CPU used."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench.workloads import cost
from bench.workloads.context import BenchContext
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.sim_consumer import Behaviour
from siding.devkit.sim_produce import produce
from siding.pipeline.driver.session import build_session

TICK = os.sysconf("SC_CLK_TCK")


def python_procs() -> dict[int, tuple[str, int, int]]:
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "daemon" not in cmd or "python" not in cmd:
                continue
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            out[int(d)] = (cmd[-60:], int(fields[1]), int(fields[11]) + int(fields[12]))
        except OSError:
            continue
    return out


class Watch:
    def __init__(self) -> None:
        self.phase = "start"
        self.seen: dict[int, dict[str, object]] = {}
        self.done = threading.Event()
        self.marks: dict[str, dict[int, int]] = {}

    def mark(self, phase: str) -> None:
        self.sample()
        self.marks[phase] = {p: int(v["ticks"]) for p, v in self.seen.items()}  # type: ignore[call-overload]
        self.phase = phase

    def sample(self) -> None:
        for pid, (cmd, ppid, ticks) in python_procs().items():
            e = self.seen.setdefault(pid, {"born": self.phase, "cmd": cmd, "ppid": ppid})
            e["ticks"] = ticks

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.sample()


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="probe-"))
    watch = Watch()
    threading.Thread(target=watch.run, daemon=True).start()
    with EmbeddedKafka() as kafka:
        spark = build_session("local[2]", app_name="probe")
        ctx = BenchContext(kafka.bootstrap, spark, workdir, 1.0)
        topic = ctx.topic("cost")
        produce(ctx.bootstrap, topic, cost.MESSAGES)
        record = ctx.record_file(topic)
        with ctx.sim(Behaviour(), record) as sim:
            watch.mark("warm-up")
            cost.warm_up(ctx, sim.target)
            watch.mark("measured")
            t = time.process_time()
            began = time.monotonic()
            with ctx.pipeline(topic, sim.target, max_in_flight=1000) as pipeline:
                pipeline.wait_committed({0: cost.MESSAGES}, timeout_s=600)
                watch.mark("end")
            print("driver cpu", time.process_time() - t, "wall", time.monotonic() - began)
        watch.done.set()
        spark.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    m, e = watch.marks["measured"], watch.marks["end"]
    for pid, v in sorted(watch.seen.items()):
        used = (e.get(pid, 0) - m.get(pid, 0)) / TICK if pid in e else None
        print(pid, "ppid", v["ppid"], "born", v["born"], "cpu_in_measured", used, v["cmd"])


if __name__ == "__main__":
    main()
