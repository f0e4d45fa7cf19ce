"""DLQ tools benchmark: ``list --limit 20`` and ``stats`` over 1,000,000 dead letters.

    python -m bench.dlq_bench [--count 1000000]

Starts an embedded broker, batch-produces dead letters with the pipeline's story headers, then
times each command end to end through the CLI entry point (a fresh SparkSession is started once,
before the timings, and reused). Writes bench/results/dlq.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer

from siding import naming
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import config_text
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.model import LaneHop
from siding.routing import story

RESULTS = Path(__file__).parent / "results" / "dlq.json"
ROUTE = "bench-dlq"
REASONS = ("dead: schema mismatch", "retries exhausted", "dead: unknown customer", "timeout")


@dataclass(frozen=True, slots=True)
class Timing:
    command: str
    seconds: float
    exit_code: int


def headers_for(n: int, now_ms: int) -> list[tuple[str, str | bytes | None]]:
    lane = n % 3
    hops = tuple(LaneHop(k, k + 1, now_ms - 1000 * (3 - k), "retry") for k in range(lane + 1))
    told = story.StoryHeaders(
        origin=story.Origin("orders", n % 12, n // 12, now_ms - 3_600_000),
        attempt=lane + 1,
        lane=lane,
        not_before_ms=0,
        hops=hops,
        reason=REASONS[n % len(REASONS)],
        died_at_ms=now_ms - (n % 48) * 3_600_000,
        route=ROUTE,
    )
    return [("trace-id", f"{n:032x}".encode()), *story.encode(told)]


def produce_letters(bootstrap: str, topic: str, count: int) -> float:
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(topic, 4)])
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
    )
    now_ms = int(time.time() * 1000)
    value = b'{"order": 12345, "amount": "19.99", "currency": "EUR", "items": [1, 2, 3]}'
    started = time.monotonic()
    for n in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"customer-{n % 5000}".encode(),
                    value=value,
                    headers=headers_for(n, now_ms),
                )
                break
            except BufferError:
                producer.poll(0.05)
        if n % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left:
        raise RuntimeError(f"{left} dead letters not acknowledged")
    return time.monotonic() - started


def run_cli(args: list[str]) -> Timing:
    from siding.cli.main import main

    argv = sys.argv
    sys.argv = ["siding", *args]
    started = time.monotonic()
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = argv
    return Timing(" ".join(args[:2] + args[4:]), time.monotonic() - started, code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, EmbeddedKafka() as broker:
        route = {"name": ROUTE, "topic": "orders", "group": "g", "endpoint": "grpc://127.0.0.1:9"}
        toml = Path(scratch) / "siding.toml"
        toml.write_text(
            config_text(broker.bootstrap, route, checkpoint_dir=scratch, master="local[*]")
        )
        produce_s = produce_letters(broker.bootstrap, naming.dlq_topic(ROUTE), options.count)
        print(f"produced {options.count:,} dead letters in {produce_s:.1f}s", flush=True)
        from siding.pipeline.driver.session import build_session

        spark_started = time.monotonic()
        build_session("local[*]", app_name="siding-dlq")
        spark_s = time.monotonic() - spark_started
        common = ["-c", str(toml), "--route", ROUTE]
        timings = [
            run_cli(["dlq", "list", *common, "--limit", "20"]),
            run_cli(["dlq", "stats", *common]),
            run_cli(["dlq", "list", *common, "--limit", "20", "--reason", "unknown cust"]),
        ]
    result = {
        "dead_letters": options.count,
        "produce_s": round(produce_s, 2),
        "spark_start_s": round(spark_s, 2),
        "timings": [asdict(t) | {"seconds": round(t.seconds, 2)} for t in timings],
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "note": "end to end through the CLI entry point, SparkSession already started",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'command':<48} {'seconds':>8}")
    for t in timings:
        print(f"{t.command:<48} {t.seconds:>8.2f}")
    print(f"(spark start {spark_s:.1f}s, not included; {os.cpu_count()} cpus)")


if __name__ == "__main__":
    main()
