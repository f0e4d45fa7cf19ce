"""Poison pills: 1 % of messages DEAD, 0.1 % hang forever. Throughput against the same run with
none, and whether exactly the poison messages reached the DLQ and every other one was ACKed."""

from __future__ import annotations

from typing import Any

from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import first_receipts, planned_delay, rate_per_s, ratio
from siding.devkit.harness import DeadLetter, PipelineRun
from siding.devkit.sim_consumer import Behaviour, Fate, plan, read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.model import delivery_id

MESSAGES = 10_000
DEAD_RATIO, HANG_RATIO = 0.01, 0.001
LATENCY_S = (0.0, 0.010)
# A hung message costs the main lane one deadline, then each lane one; after the last, the DLQ.
ROUTE: dict[str, object] = {
    "max_in_flight": 200,
    "deadline": "1s",
    "lanes": [{"delay": "0s", "deadline": "1s"}],
    "adaptive": {"enabled": False},
}


def poison_ids(b: Behaviour, topic: str, count: int) -> tuple[set[str], set[str]]:
    """(every id, the ids that must end in the DLQ) as the consumer's plan decides them."""
    ids = {delivery_id(topic, 0, offset) for offset in range(count)}
    return ids, {i for i in ids if plan(b, i, 1).fate in (Fate.DEAD, Fate.HANG)}


def _wait_for_dlq(pipeline: PipelineRun, expected: int) -> list[DeadLetter]:
    if not expected:
        return pipeline.dead_letters()

    def enough() -> list[DeadLetter]:
        letters = pipeline.dead_letters()
        return letters if len(letters) >= expected else []

    return wait_until(
        enough, timeout_s=120, interval_s=0.5, what="poison in the DLQ", check=pipeline.check
    )


def _run(ctx: BenchContext, count: int, b: Behaviour) -> dict[str, Any]:
    topic = ctx.topic(f"poison-{int(b.dead_ratio * 1000)}")
    produce(ctx.bootstrap, topic, count)
    every, poison = poison_ids(b, topic, count)
    record = ctx.record_file(topic)
    with ctx.sim(b, record) as sim, ctx.pipeline(topic, sim.target, **ROUTE) as pipeline:
        pipeline.wait_committed({0: count}, timeout_s=count / 20 + 120)
        letters = _wait_for_dlq(pipeline, len(poison))
        acked_by_pipeline = pipeline.totals.counts.acked
    received = read_records(record)
    firsts = [r for r in received if r.attempt == 1]
    dlq = {x.story.origin.delivery_id for x in letters if x.story is not None}
    acked = {i for i in first_receipts(received) if plan(b, i, 1).fate is Fate.ACK}
    return {
        "msgs_per_s": rate_per_s(firsts, planned_delay(b)),
        "dlq_exact": dlq == poison and len(letters) == len(poison),
        "lost": len(every - acked - dlq),
        "poison": len(poison),
        "dlq": len(letters),
        "acked": acked_by_pipeline,
    }


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=2000)
    clean = _run(ctx, count, Behaviour(latency_s=LATENCY_S))
    dirty = _run(
        ctx, count, Behaviour(latency_s=LATENCY_S, dead_ratio=DEAD_RATIO, hang_ratio=HANG_RATIO)
    )
    return [
        {
            "name": "poison_pills",
            "messages": count,
            "siding_msgs_per_s": round(dirty["msgs_per_s"], 1),
            "siding_msgs_per_s_without_poison": round(clean["msgs_per_s"], 1),
            "ratio_to_without_poison": ratio(dirty["msgs_per_s"], clean["msgs_per_s"]),
            "dlq_exact": dirty["dlq_exact"] and clean["dlq"] == 0,
            "lost": dirty["lost"] + clean["lost"],
            "poison_messages": dirty["poison"],
            "dlq_records": dirty["dlq"],
            "acked_by_pipeline": dirty["acked"],
            "settings": {
                "dead_ratio": DEAD_RATIO,
                "hang_ratio": HANG_RATIO,
                "latency_ms": [x * 1000 for x in LATENCY_S],
                "siding_route": ROUTE,
            },
        }
    ]
