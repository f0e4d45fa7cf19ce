"""Throughput and its cost: a backlog of 20,000 messages already in the topic (1 and 8 partitions),
a consumer that takes 10 ms for each; how fast each system drains it, and the CPU seconds per
1,000 messages of its own process tree (siding: this process, the driver, with Spark's JVM and
Python workers; a peer: its own process). siding runs with the defaults over its gRPC stream and
over HTTP webhooks; the peers push over HTTP to the same simulated consumer.

Each run: a fresh topic filled before the system starts, a fresh simulated consumer, the system
started (siding: a new route; a peer: a new consumer or share group reading from the oldest
offset), then the wait until every message was received, and until the consumer has been quiet
for ``traffic.QUIET_S`` so second deliveries are counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from bench.peers import share_group
from bench.workloads import cost, hol, hol_peers
from bench.workloads.context import BenchContext, scaled
from bench.workloads.cpu import CpuMeter, children_of, peak_rss_fields, sampling_overhead_s
from bench.workloads.measure import drain, planned_delay, redeliveries
from bench.workloads.traffic import QUIET_S, RecordTail, Siding, System, wait_quiet
from siding.devkit.sim_consumer import Behaviour, read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import WaitTimeout

MESSAGES = 20_000
PARTITIONS = (1, 8)
CONSUMER_S = 0.010
BEHAVIOUR = Behaviour(latency_s=(CONSUMER_S, CONSUMER_S))
IN_FLIGHT = hol.IN_FLIGHT  # siding's default max_in_flight; the peers get the same
# A backlog of equally quick records: big polls, few broker round trips; 10 consumers of 100
# records keep IN_FLIGHT in flight. (The HOL traffic's one record a poll drains 20,000 records
# one broker round trip at a time: 121 s in issue 29's try.)
SHARE_BACKLOG = share_group.for_backlog(IN_FLIGHT, consumers=10)
START_TIMEOUT_S = 180.0  # from the start to the first receipt (a Spark query, a group join)
POLL_S = 0.1


def systems() -> dict[str, Callable[[], System]]:
    return {
        "siding_grpc_defaults": lambda: Siding("siding_grpc_defaults", "grpc", None),
        "siding_http_defaults": lambda: Siding("siding_http_defaults", "http", None),
        **hol_peers.peer_systems(IN_FLIGHT, share=SHARE_BACKLOG),
    }


def done_timeout_s(count: int) -> float:
    """How long a drain may take: 100 msg/s (a tenth of the in-flight bound), plus a minute."""
    return count / 100 + 60


def _wait_ids(
    tail: RecordTail, enough: Callable[[int], bool], timeout_s: float, check: Callable[[], None]
) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        check()
        tail.poll()
        if enough(len(tail.ids)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def measure(
    ctx: BenchContext, system: System, partitions: int, count: int, broker_pid: int
) -> dict[str, Any]:
    """``system`` draining ``count`` messages from a topic of ``partitions`` partitions."""
    topic = ctx.topic(f"tput-{system.name.replace('_', '-')}-{partitions}p")
    produce(ctx.bootstrap, topic, count, partitions=partitions)
    record = ctx.record_file(topic)
    tail = RecordTail(record)
    before = children_of(os.getpid())
    with ctx.sim(BEHAVIOUR, record, transport=system.transport) as sim:
        # the consumer service is the only process started since: not the system's own
        exclude = {broker_pid} | (children_of(os.getpid()) - before)
        started_wall = time.time()
        meter = None
        sampled_before = sampling_overhead_s()
        if isinstance(system, Siding):  # the route's start (the Spark query's) counts too
            meter = CpuMeter(os.getpid(), exclude).start()
        with system.start(ctx, topic, sim, count) as running:
            if meter is None:  # a peer's process was just born: it has used next to nothing
                meter = CpuMeter(running.process_root(), exclude, root_kind=system.name).start()
            if not _wait_ids(tail, lambda n: n > 0, START_TIMEOUT_S, running.check):
                raise WaitTimeout(f"{system.name} delivered nothing in {START_TIMEOUT_S:g}s")
            at_first = meter.now()
            complete = _wait_ids(tail, lambda n: n >= count, done_timeout_s(count), running.check)
            meter.stop()
            wait_quiet(tail, QUIET_S, timeout_s=60.0)
    by_kind = meter.by_kind
    if isinstance(system, Siding):  # the sampling (this meter's, make bench's RSS meter's) ran
        # in siding's driver: not siding's CPU
        by_kind["driver (Python)"] -= sampling_overhead_s() - sampled_before
    total = sum(by_kind.values())
    records = [r for r in read_records(record) if r.delivery_id.startswith(f"{topic}/")]
    got = drain(records, planned_delay(BEHAVIOUR), started_wall, total - at_first, total)
    return {
        "partitions": partitions,
        "complete": complete,
        "delivered": got.messages,
        "drain_s": round(got.seconds, 2),
        "msgs_per_s": got.msgs_per_s,
        "drain_s_with_start": round(got.seconds_with_start, 2),
        "cpu_s": round(got.cpu_s, 2),
        "cpu_s_per_1000": got.cpu_s_per_1000,
        "cpu_s_per_1000_with_start": got.cpu_s_per_1000_with_start,
        "cpu_s_by_process_with_start": {
            k: round(v, 2) for k, v in sorted(by_kind.items()) if round(v, 2)
        },
        "delivered_more_than_once": redeliveries(records).messages,
        **peak_rss_fields(meter),
    }


def warm_up(ctx: BenchContext) -> None:
    """Spark's JVM and Python workers warmed by an untimed route (``cost.warm_up``), so siding's
    first run does not pay a fresh JVM's JIT alone or first in ``make bench`` alike."""
    with ctx.sim(Behaviour(), ctx.record_file("tput-warm-up")) as sim:
        cost.warm_up(ctx, sim.target)


def run(ctx: BenchContext, broker_pid: int) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=2000)
    warm_up(ctx)
    results: dict[str, dict[str, Any]] = {}
    for name, make in systems().items():
        try:
            system = make()
        except Exception as exc:  # a peer that cannot be built has no runs, and says why
            results[name] = {"runs": None, "error": f"{type(exc).__name__}: {exc}"}
            continue
        runs: list[dict[str, Any]] = []
        for partitions in PARTITIONS:
            try:
                runs.append(measure(ctx, system, partitions, count, broker_pid))
            except Exception as exc:
                runs.append({"partitions": partitions, "error": f"{type(exc).__name__}: {exc}"})
        results[name] = {"runs": runs}
    return [
        {
            "name": "throughput",
            "messages": count,
            "partitions": list(PARTITIONS),
            "systems": results,
            "settings": {
                "consumer_ms": CONSUMER_S * 1000,
                "siding_route": "defaults (name, topic, group, endpoint; default trigger)",
                "in_flight": IN_FLIGHT,
                "share_group": {
                    "consumers": SHARE_BACKLOG.consumers,
                    "max_poll_records": SHARE_BACKLOG.max_poll_records,
                    "acquire_mode": "record_limit",
                },
                "cpu": "the system's process tree over the drain (first receipt to the last"
                " receipt); *_with_start from the system's start",
            },
        }
    ]
