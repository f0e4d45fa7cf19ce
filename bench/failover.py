"""Failover (issue 28): what a SIGKILL of the driver costs, with a standby and with a cold start.

    python -m bench.failover [--messages 3000] [--rate 200] [--lease 10s] [--only standby|cold]
                             [--checkpoint s3|local]

Messages are produced at ``--rate`` to one partition for a gRPC consumer answering in 10-50 ms.
Driver A (``siding run``, a real process, the fence on) delivers them; at a third its whole
process group is SIGKILLed. Then, per mode:

- ``standby``: B (``siding run --standby``, started before the traffic and waiting on the fence)
  takes the route over;
- ``cold``: a new ``siding run`` is started right after the kill as another node would: its own
  folder for its config, log and Spark scratch space, the same checkpoint.

Reported per mode: seconds from the kill to the new driver's first delivery, split where the
logs say (the fence taken; the new driver's Spark up, cold only), p99 latency (produce to first
receipt) of the messages produced between the kill and that first delivery, lost (must be 0)
and delivered twice. The checkpoint is on a real S3 server (S3Proxy on loopback, ``s3a://``; the
credentials in the environment, as a deployment has them), or with ``--checkpoint local`` a local
folder both processes share. Writes ``bench/results/failover.json``.
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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.workloads.measure import latencies_ms, rounded_percentile
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.process import start_siding_run
from siding.devkit.s3_server import S3Server
from siding.devkit.sim_consumer import Behaviour, SimConsumerProcess, SimSettings, read_records
from siding.devkit.sim_produce import new_producer, produce
from siding.devkit.wait import wait_until
from siding.model import delivery_id

RESULTS = Path(__file__).parent / "results" / "failover.json"
LATENCY_S = (0.01, 0.05)
SPARK_START_S = 300


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(60)


def _logged_at(log: Path, text: str) -> float | None:
    """The wall-clock time of the first log line containing ``text`` (log times are UTC)."""
    for line in log.read_text(errors="replace").splitlines():
        if text in line:
            with contextlib.suppress(ValueError):
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.replace(tzinfo=UTC).timestamp()
    return None


def _config(
    work: Path, bootstrap: str, endpoint: str, checkpoint: str, lease: str, *, conf: dict[str, str]
) -> Path:
    route = {"name": "failover", "topic": "failover-bench", "group": "failover-group"}
    text = config_text(bootstrap, {**route, "endpoint": endpoint}, checkpoint_dir=checkpoint)
    fence = f'[fence]\nenabled = true\nlease = "{lease}"\n'
    pairs = ", ".join(f'"{k}" = "{v}"' for k, v in {"spark.local.dir": str(work), **conf}.items())
    text = text.replace("[spark]\n", f"[spark]\nconf = {{{pairs}}}\n")
    path = work / "siding.toml"
    path.write_text(text.replace("[[route]]", fence + "[[route]]"))
    return path


@contextlib.contextmanager
def _checkpoint(kind: str, root: Path) -> Iterator[tuple[str, dict[str, str], dict[str, str]]]:
    """Where the checkpoint is, the ``[spark.conf]`` that reaches it, and the environment the
    runs need (an S3 server's credentials)."""
    if kind == "local":
        yield str(root / "ckpt"), {}, {}
        return
    with S3Server(folder=root / "s3") as s3:
        conf = {k: v for k, v in s3.hadoop_conf().items() if not k.endswith(".key")}
        env = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
        yield "s3a://siding/checkpoints", conf, env


def measure(mode: str, messages: int, rate: float, lease: str, kind: str) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(EmbeddedKafka())
        checkpoint, conf, env = stack.enter_context(_checkpoint(kind, root))
        nodes = {name: root / name for name in ("a", "b")}
        for folder in nodes.values():
            folder.mkdir()
        record = root / "received.csv"
        sim = SimConsumerProcess(
            SimSettings(behaviour=Behaviour(latency_s=LATENCY_S), record=str(record))
        ).start()
        endpoint = f"grpc://{sim.target}"
        configs = {
            n: _config(f, broker.bootstrap, endpoint, checkpoint, lease, conf=conf)
            for n, f in nodes.items()
        }
        logs = {n: f / "siding.log" for n, f in nodes.items()}
        watcher = PipelineRun(parse_config(configs["a"].read_text()))
        topic = watcher.route.single_topic or ""
        producer = new_producer(broker.bootstrap)
        produce(broker.bootstrap, topic, 1, producer=producer)  # creates the topic
        producing = threading.Thread(
            target=produce,
            args=(broker.bootstrap, topic, messages - 1),
            kwargs={"rate": rate, "producer": producer, "start_seq": 1},
        )

        def received() -> int:
            return len(read_records(record))

        procs: list[subprocess.Popen[bytes]] = []
        try:
            procs.append(start_siding_run(configs["a"], logs["a"], env=env))
            wait_until(lambda: received() >= 1, timeout_s=SPARK_START_S, what="A delivers")
            if mode == "standby":
                procs.append(start_siding_run(configs["b"], logs["b"], "--standby", env=env))
                wait_until(
                    lambda: _logged_at(logs["b"], "waiting for the routes' fences"),
                    timeout_s=SPARK_START_S,
                    what="the standby waits",
                )
            producing.start()
            wait_until(lambda: received() >= messages // 3, timeout_s=120, what="a third")
            _stop(procs[0], signal.SIGKILL)
            killed_at = time.time()
            if mode == "cold":
                procs.append(start_siding_run(configs["b"], logs["b"], env=env))
            wait_until(
                lambda: any(r.received_s > killed_at + 1 for r in read_records(record)),
                timeout_s=SPARK_START_S,
                what="the new driver's first delivery",
            )
            producing.join()
            watcher.wait_committed({0: messages}, timeout_s=300)
            time.sleep(3)  # late redeliveries are counted too
        finally:
            for proc in reversed(procs):
                _stop(proc, signal.SIGTERM)
            sim.stop()
        deliveries = read_records(record)
        # The new driver sends nothing before it holds the fence; calls the dead one had sent
        # may still reach the consumer just after the kill.
        fenced_at = _logged_at(logs["b"], "holds its fence") or killed_at
        first_new = min(r.received_s for r in deliveries if r.received_s > fenced_at)
        during = {
            r.delivery_id
            for r in deliveries
            if r.produced_s is not None and killed_at <= r.produced_s <= first_new
        }
        times = Counter(r.delivery_id for r in deliveries)
        expected = {delivery_id(topic, 0, o) for o in range(messages)}
        in_dlq = {x.story.origin.delivery_id for x in watcher.dead_letters() if x.story}

        def since_kill(text: str) -> float | None:
            at = _logged_at(logs["b"], text)
            return round(at - killed_at, 1) if at is not None else None

        return {
            "mode": mode,
            "messages": messages,
            "kill_to_first_delivery_s": round(first_new - killed_at, 1),
            "kill_to_fence_held_s": since_kill("holds its fence"),
            "kill_to_routes_running_s": since_kill("siding: running"),
            "produced_during_failover": len(during),
            "p99_latency_during_failover_ms": rounded_percentile(
                latencies_ms(deliveries, during), 99
            ),
            "p99_latency_all_ms": rounded_percentile(latencies_ms(deliveries), 99),
            "lost": len(expected - set(times) - in_dlq),
            "delivered_twice": sum(1 for n in times.values() if n > 1),
            "settings": {
                "rate_msgs_per_s": rate,
                "latency_ms": [x * 1000 for x in LATENCY_S],
                "fence_lease": lease,
                "fence_renew": "default (2s)",
                "trigger": "200ms",
                "checkpoint": checkpoint if kind == "s3" else "a local folder both share",
            },
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--lease", default="10s", help="[fence] lease")
    parser.add_argument("--only", choices=("standby", "cold"), action="append")
    parser.add_argument("--checkpoint", choices=("s3", "local"), default="s3")
    args = parser.parse_args()
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for mode in args.only or ("standby", "cold"):
        result = measure(mode, args.messages, args.rate, args.lease, args.checkpoint)
        result |= {
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared",
        }
        data[mode] = result
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(data, indent=2) + "\n")
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
