"""Replay after a crash (issue 13): duplicates when ``siding run`` is SIGKILLed mid-flight.

    python -m bench.replay_bench --label before|after [--messages 3000] [--rate 100]

The user's scenario, scaled to about a minute: messages produced at 100 msg/s to one partition
for a gRPC consumer answering in 100-200 ms (max_in_flight 100); ``siding run`` (a real process)
is SIGKILLed (its whole process group) twice and started again at once: once in steady traffic,
once in the middle of the large batch that catches up with what arrived while it was down.
Then a last run finishes, and the consumer's record file is counted: deliveries, distinct
records, duplicates, and records lost (neither ACKed nor dead-lettered: must be 0).

Run it with the code under test's interpreter: ``.venv/bin/python -m bench.replay_bench --label
before`` in a checkout of the code before, then ``--label after`` in the one after (the child
``siding run`` is started with the same interpreter). Writes ``bench/results/replay.json``, one
entry per label.
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
from pathlib import Path
from typing import Any

from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.process import start_siding_run
from siding.devkit.sim_consumer import Behaviour, SimConsumerProcess, SimSettings, read_records
from siding.devkit.sim_produce import new_producer, produce
from siding.devkit.wait import wait_until
from siding.model import delivery_id

RESULTS = Path(__file__).parent / "results" / "replay.json"
LATENCY_S = (0.1, 0.2)
MAX_IN_FLIGHT = 100


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def measure(messages: int, rate: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch, EmbeddedKafka() as broker:
        work = Path(scratch)
        topic = "replay-bench"
        record = work / "received.csv"
        sim = SimConsumerProcess(
            SimSettings(behaviour=Behaviour(latency_s=LATENCY_S), record=str(record))
        ).start()
        route = {
            "name": "replay",
            "topic": topic,
            "group": "replay-group",
            "endpoint": f"grpc://{sim.target}",
            "max_in_flight": MAX_IN_FLIGHT,
            "deadline": "5s",
            "lanes": [{"delay": "1s"}],
        }
        text = config_text(broker.bootstrap, route, checkpoint_dir=work / "ckpt", trigger=None)
        config = work / "siding.toml"
        config.write_text(text)
        watcher = PipelineRun(parse_config(text))  # reads offsets only; never started
        log = work / "siding.log"
        producer = new_producer(broker.bootstrap)
        produce(broker.bootstrap, topic, 1, producer=producer)  # creates the topic
        producing = threading.Thread(
            target=produce,
            args=(broker.bootstrap, topic, messages - 1),
            kwargs={"rate": rate, "producer": producer, "start_seq": 1},
        )

        def received() -> int:
            return len(read_records(record))

        try:
            kills: list[dict[str, Any]] = []
            proc = start_siding_run(config, log)
            wait_until(lambda: received() >= 1, timeout_s=180, what="the first delivery")
            started = time.monotonic()
            producing.start()
            # Kill 1: steady traffic, a third of the way in
            wait_until(lambda: received() >= messages // 3, timeout_s=180, what="a third")
            kills.append({"at_s": round(time.monotonic() - started, 1), "received": received()})
            _kill(proc)
            # Kill 2: in the middle of the batch that catches up after the restart
            before = received()
            proc = start_siding_run(config, log)
            wait_until(lambda: received() >= before + 600, timeout_s=180, what="catching up")
            kills.append({"at_s": round(time.monotonic() - started, 1), "received": received()})
            _kill(proc)
            proc = start_siding_run(config, log)
            producing.join()
            watcher.wait_committed({0: messages}, timeout_s=300)
            time.sleep(3)  # late redeliveries are counted too
            elapsed = time.monotonic() - started
        finally:
            with contextlib.suppress(NameError):
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            sim.stop()
        deliveries = read_records(record)
        times = Counter(r.delivery_id for r in deliveries)
        expected = {delivery_id(topic, 0, o) for o in range(messages)}
        in_dlq = {x.story.origin.delivery_id for x in watcher.dead_letters() if x.story}
        skipped = sum(
            int(line.split(": ")[-1].split()[0])
            for line in log.read_text(errors="replace").splitlines()
            if "were not delivered again" in line
        )
        return {
            "messages": messages,
            "deliveries": len(deliveries),
            "distinct": len(times),
            "duplicates": len(deliveries) - len(times),
            "lost": len(expected - set(times) - in_dlq),
            "skipped_on_replay": skipped,
            "kills": kills,
            "seconds": round(elapsed, 1),
            "settings": {
                "rate_msgs_per_s": rate,
                "latency_ms": [x * 1000 for x in LATENCY_S],
                "max_in_flight": MAX_IN_FLIGHT,
                "transport": "grpc stream",
                "trigger": "default (0s)",
            },
        }


def _git_rev() -> str:
    try:
        import siding

        src = Path(siding.__file__).resolve().parent
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return f"{out.stdout.strip()} ({src})"
    except (subprocess.CalledProcessError, OSError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="before / after: the entry to (re)write")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    result = measure(args.messages, args.rate)
    result |= {
        "code": _git_rev(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared",
    }
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[args.label] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
