"""Where a blocked key's time goes on the key_retry workload (issue 27 item 5, stop 40).

    PYTHONPATH=. .venv/bin/python bench/results/stop-40/key/trace.py --out DIR [--no-failures]

Runs siding's half of ``bench.workloads.key_retry`` (with failures) on its own broker and Spark,
then joins three records of the same run:

- the simulated consumer's receipts (every delivery: id, attempt, received, produced, seq);
- every batch the driver finished (lane, end time, seconds from its start, step counts and
  dispatch stats), through ``PipelineRun``'s result callback;
- the route's hold topic, read from its beginning after the run (every record written there,
  with its Kafka timestamp: held records and retries, written again each batch they wait).

and writes ``trace-<ts>.json`` (per failure and per batch rows) and prints a summary.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.workloads import key_retry as kr
from bench.workloads.context import BenchContext
from bench.workloads.measure import first_receipts, latencies_ms, rounded_percentile
from bench.workloads.traffic import Running, _SidingRunning, push
from siding import naming
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.pipeline.driver.session import build_session
from siding.pipeline.executor.result import TaskResult

BATCHES: list[dict[str, Any]] = []
LOCK = threading.Lock()
ROUTES: list[str] = []


def on_batch(_route: str, lane: int, results: list[TaskResult], seconds: float) -> None:
    end = time.time()
    row: dict[str, Any] = {"lane": lane, "end": end, "start": end - seconds, "s": seconds}
    for field in ("records", "acked", "to_lane", "held"):
        row[field] = sum(getattr(r.counts, field) for r in results)
    stats = [r.stats for r in results if r.stats is not None]
    row["sent"] = sum(s.sends for s in stats)
    row["retried_in_batch"] = sum(getattr(s, "retried_in_batch", 0) for s in stats)
    row["left_batch"] = sum(getattr(s, "left_batch", 0) for s in stats)
    row["tasks"] = len(results)
    with LOCK:
        BATCHES.append(row)


class TracedSiding:
    name = "siding_key_http"
    transport = "http"

    def start(self, ctx: BenchContext, topic: str, sim: Any, _total: int) -> Any:
        import contextlib

        @contextlib.contextmanager
        def run() -> Any:
            name = f"{topic.removeprefix('bench-')}-{uuid.uuid4().hex[:4]}"
            ROUTES.append(name)
            settings: dict[str, object] = {
                "name": name,
                "topic": topic,
                "group": f"{name}-group",
                "endpoint": f"http://{sim.target}/",
                "dlq_flood_min_batch": 1_000_000,
                **kr.ROUTE,
            }
            pr = PipelineRun.from_route(
                ctx.bootstrap,
                settings,
                checkpoint_dir=ctx.workdir / f"checkpoints-{name}",
                spark=ctx.spark,
                master=ctx.master,
                trigger=None,
                also=on_batch,
            )
            with pr:
                running: Running = _SidingRunning(pr)
                yield running

        return run()


def hold_records(bootstrap: str, topic: str) -> list[tuple[float, str]]:
    """(Kafka timestamp s, the original record's id) of every record in the hold topic."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"trace-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    meta = c.list_topics(topic, timeout=10).topics[topic]
    parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
    ends = {p.partition: c.get_watermark_offsets(p, timeout=10)[1] for p in parts}
    c.assign(parts)
    out: list[tuple[float, str]] = []
    left = sum(ends.values())
    deadline = time.monotonic() + 30
    while left > 0 and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is None or msg.error():
            continue
        left -= 1
        headers = dict(msg.headers() or [])
        ident = f"{_text(headers.get('siding.id'))}@{_text(headers.get('siding.lane'))}"
        out.append((msg.timestamp()[1] / 1000, ident))
    c.close()
    return out


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def analyse(pushed: Any, b: Any, holds: list[tuple[float, str]]) -> dict[str, Any]:
    recs = pushed.records
    by_id: dict[str, list[Any]] = defaultdict(list)
    for r in recs:
        by_id[r.delivery_id].append(r)
    seq_of = {r.seq: r.delivery_id for r in recs if r.seq is not None}
    failing = sorted(kr.failing_ids(b, pushed.topic, len(pushed.expected)))
    main = sorted((x for x in BATCHES if x["lane"] == 0), key=lambda x: x["start"])
    starts = [x["start"] for x in main]

    def batch_at(t: float) -> dict[str, Any] | None:
        i = bisect.bisect_right(starts, t) - 1
        return main[i] if i >= 0 else None

    rows = []
    for ident in failing:
        got = sorted(by_id.get(ident, []), key=lambda r: r.received_s)
        first = next((r for r in got if r.attempt == 1), None)
        retry = next((r for r in got if r.attempt >= 2), None)
        if first is None or retry is None or first.seq is None:
            continue
        answer = first.received_s + 0.011  # the consumer's 5-17 ms
        due = answer + kr.RETRY_DELAY_S
        follower_id = seq_of.get(first.seq + kr.KEYS)
        follower = min(
            (r.received_s for r in by_id.get(follower_id or "", []) if r.attempt == 1),
            default=None,
        )
        fb = batch_at(first.received_s)
        rb = batch_at(retry.received_s)
        rows.append(
            {
                "seq": first.seq,
                "produced": first.produced_s,
                "first_sent": first.received_s,
                "due": due,
                "retry_sent": retry.received_s,
                "late_ms": round((retry.received_s - due) * 1000),
                "block_ms": round((retry.received_s - first.received_s) * 1000),
                "retry_batch_start_after_due_ms": round((rb["start"] - due) * 1000) if rb else None,
                "retry_batch_start_to_send_ms": round((retry.received_s - rb["start"]) * 1000)
                if rb
                else None,
                "same_batch_as_failure": fb is rb,
                "follower_after_retry_ms": round((follower - retry.received_s) * 1000)
                if follower
                else None,
                "first_wait_ms": round((first.received_s - first.produced_s) * 1000)
                if first.produced_s
                else None,
            }
        )
    never = pushed.expected - set(failing)
    lat = latencies_ms(recs, never)
    firsts = first_receipts([r for r in recs if r.delivery_id in pushed.expected])
    produced = sorted(r.produced_s for r in firsts.values() if r.produced_s)
    hold_ts = sorted(t for t, _ in holds)
    for x in main:
        lo = bisect.bisect_left(hold_ts, x["start"])
        hi = bisect.bisect_right(hold_ts, x["end"])
        x["hold_written"] = hi - lo

    def pct(vals: list[float], q: int) -> float | None:
        return rounded_percentile(vals, q) if vals else None

    def col(name: str) -> list[float]:
        return [r[name] for r in rows if r[name] is not None]

    summary = {
        "never_failed_p50_ms": pct(lat, 50),
        "never_failed_p99_ms": pct(lat, 99),
        "produce_span_s": round(produced[-1] - produced[0], 2) if produced else None,
        "produce_rate": round((len(produced) - 1) / (produced[-1] - produced[0]), 1)
        if len(produced) > 1
        else None,
        "seconds": round(pushed.seconds, 1),
        "failures": len(rows),
        "hold_topic_records": len(holds),
        "main_batches": len(main),
        "main_batch_s_p50": pct([x["s"] for x in main], 50),
        "main_batch_s_p90": pct([x["s"] for x in main], 90),
        "main_batch_records_p50": pct([x["records"] for x in main], 50),
        "hold_written_per_batch_p50": pct([x["hold_written"] for x in main], 50),
        "hold_written_per_batch_max": max((x["hold_written"] for x in main), default=None),
    }
    for name in (
        "block_ms",
        "late_ms",
        "retry_batch_start_after_due_ms",
        "retry_batch_start_to_send_ms",
        "follower_after_retry_ms",
        "first_wait_ms",
    ):
        vals = col(name)
        summary[name] = {"p10": pct(vals, 10), "p50": pct(vals, 50), "p90": pct(vals, 90)}
    summary["retry_in_failing_batch"] = sum(1 for r in rows if r["same_batch_as_failure"])
    return {"summary": summary, "failures": rows, "batches": BATCHES}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-failures", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="siding-keytrace-"))
    with EmbeddedKafka() as kafka:
        spark = build_session("local[2]", app_name="siding-keytrace")
        ctx = BenchContext(kafka.bootstrap, spark, workdir, 1.0)
        b = kr.behaviour(not args.no_failures)
        pushed = push(
            ctx,
            TracedSiding(),  # type: ignore[arg-type]
            label="keytrace",
            behaviour=b,
            count=kr.MESSAGES,
            rate=kr.RATE,
            done_timeout_s=kr.DONE_TIMEOUT_S,
            keys=kr.KEYS,
        )
        holds = hold_records(kafka.bootstrap, naming.hold_topic(ROUTES[-1]))
        spark.stop()
    result = analyse(pushed, b, holds)
    result["summary"]["order_violations"] = kr.summarise(pushed, b, kr.MESSAGES)["order_violations"]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = args.out / f"trace-{stamp}.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
