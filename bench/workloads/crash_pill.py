"""A message that kills the consumer (issue 18): 3,000 messages at 100 msg/s to a route with the
defaults over the gRPC stream; one message makes the consumer exit at once, and a supervisor
restarts it 2 s after each exit, as Kubernetes would. Against the same traffic without the pill.

Reports the deaths until the pill was convicted (dead-lettered), the time from the first death to
the conviction, the duplicate deliveries of innocent messages, and the produce-to-delivery
latency of innocent messages, overall and for those produced while the isolation ran.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import first_receipts, rounded_percentile
from bench.workloads.traffic import start_producer, traffic_ids
from siding.devkit.harness import DeadLetter
from siding.devkit.sim_consumer import (
    Behaviour,
    Received,
    SimConsumerProcess,
    SimSettings,
    read_records,
)
from siding.devkit.sim_produce import new_producer, produce
from siding.devkit.supervisor import Supervisor
from siding.devkit.wait import wait_until
from siding.model import delivery_id

MESSAGES = 3000
RATE = 100.0
LATENCY_S = (0.005, 0.015)
RESTART_S = 2.0
CRASH_LIMIT = 3


def _run(ctx: BenchContext, count: int, pill: int | None) -> dict[str, Any]:
    topic = ctx.topic("crash" if pill is not None else "crash-none")
    producer = new_producer(ctx.bootstrap)
    produce(ctx.bootstrap, topic, 1, producer=producer)  # the warm-up, left out of the numbers
    record = ctx.record_file(topic)
    crash_on = (f'"seq": {pill}}}',) if pill is not None else ()
    settings = SimSettings(
        behaviour=Behaviour(latency_s=LATENCY_S), record=str(record), crash_on=crash_on
    )
    pill_id = delivery_id(topic, 0, pill) if pill is not None else None  # seq n is offset n
    convicted_at = None
    with Supervisor(SimConsumerProcess(settings), restart_s=RESTART_S) as supervisor:
        target = supervisor.consumer.target
        with ctx.pipeline(topic, target, crash_limit=CRASH_LIMIT) as run:
            run.wait_committed({0: 1}, timeout_s=120)  # running, before the measured traffic
            producing = start_producer(ctx, topic, count, RATE, producer)
            if pill_id is not None:
                wait_until(lambda: bool(run.dead_letters()), timeout_s=300, check=run.check)
                convicted_at = time.time()
            producing.join()
            run.wait_committed({0: count + 1}, timeout_s=300)
            letters = run.dead_letters()
        deaths = list(supervisor.exits)
        restarts = list(supervisor.restarts)
    received = read_records(record)
    times = Counter(r.delivery_id for r in received)
    innocent = traffic_ids(topic, count) - {pill_id}
    firsts = first_receipts(r for r in received if r.delivery_id in innocent)
    lat = [(r.received_s - r.produced_s) * 1000 for r in firsts.values() if r.produced_s]
    during: list[float] = []
    if deaths and convicted_at is not None:
        began = deaths[0][0]
        during = [
            (r.received_s - r.produced_s) * 1000
            for r in firsts.values()
            if r.produced_s is not None and began <= r.produced_s <= convicted_at
        ]
    return {
        "deaths": len(deaths),
        "convicted": [x.story.reason for x in letters if x.story is not None],
        # The deaths the conviction counted: as many as ``deaths`` when none was lost on the way.
        "deaths_counted": counted_deaths(letters, pill_id),
        "seconds_first_death_to_conviction": (
            round(convicted_at - deaths[0][0], 1) if deaths and convicted_at else None
        ),
        "innocent_in_dlq": sum(
            1 for x in letters if x.story is not None and x.story.origin.delivery_id != pill_id
        ),
        "innocent_delivered": len(firsts),
        "innocent_expected": len(innocent),
        "duplicate_deliveries": sum(n - 1 for i, n in times.items() if i in innocent),
        # The same repeats by the death they followed, and by lane: which death asked again.
        "duplicates_after_death": repeats_after_deaths(
            (r for r in received if r.delivery_id in innocent), [at for at, _ in deaths]
        ),
        "p50_ms": rounded_percentile(lat, 50),
        "p99_ms": rounded_percentile(lat, 99),
        "during_isolation_messages": len(during),
        "during_isolation_p50_ms": rounded_percentile(during, 50),
        "during_isolation_p99_ms": rounded_percentile(during, 99),
        "timeline": timeline(deaths, restarts, convicted_at, firsts.values()),
        # Each time the consumer got the pill (it records a delivery before it dies of it): as
        # many as the deaths, unless something else killed it.
        "pill_received_s": pill_receipts(received, pill_id, deaths[0][0] if deaths else None),
        "exit_codes": [code for _, code in deaths],  # CRASH_EXIT_CODE: the pill's doing
    }


def counted_deaths(letters: Iterable[DeadLetter], pill_id: str | None) -> int | None:
    """The deaths the pill's conviction says it counted ("the consumer died N times")."""
    for letter in letters:
        story = letter.story
        if story is not None and story.origin.delivery_id == pill_id:
            found = re.search(r"died (\d+) times", story.reason)
            return int(found.group(1)) if found else None
    return None


def repeats_after_deaths(received: Iterable[Received], deaths: list[float]) -> list[dict[str, Any]]:
    """Pure: each receipt of a message after its first, counted by the last death before it
    (index 0: before any death) and by lane."""
    seen: set[str] = set()
    lanes = [Counter[str]() for _ in range(len(deaths) + 1)]
    for r in sorted(received, key=lambda r: r.received_s):
        if r.delivery_id not in seen:
            seen.add(r.delivery_id)
            continue
        lanes[sum(1 for at in deaths if at <= r.received_s)][str(r.lane)] += 1
    return [
        {"death": n, "repeats": lane.total(), "by_lane": dict(lane)} for n, lane in enumerate(lanes)
    ]


def pill_receipts(
    received: Iterable[Received], pill_id: str | None, began: float | None
) -> list[dict[str, Any]]:
    """Pure: when (seconds from the first death) and in which lane and attempt the consumer
    received the pill."""
    if pill_id is None or began is None:
        return []
    return [
        {"at_s": round(r.received_s - began, 2), "lane": r.lane, "attempt": r.attempt}
        for r in received
        if r.delivery_id == pill_id
    ]


def timeline(
    deaths: list[tuple[float, int]],
    restarts: list[float],
    convicted_at: float | None,
    firsts: Iterable[Received],
) -> dict[str, Any] | None:
    """Pure: where the time went, in seconds from the first death: each death, each restart
    serving again, the conviction, and per second of production from the first death to the
    conviction (and 5 s after) the innocents produced then: how many, their median and largest
    latency, and the latest second any of them reached the consumer."""
    if not deaths:
        return None
    began = deaths[0][0]
    end = (convicted_at if convicted_at is not None else deaths[-1][0]) + 5
    by_second: dict[int, list[Received]] = {}
    for r in firsts:
        if r.produced_s is not None and began <= r.produced_s <= end:
            by_second.setdefault(int(r.produced_s - began), []).append(r)
    seconds = []
    for second, got in sorted(by_second.items()):
        lat = [(r.received_s - r.produced_s) * 1000 for r in got if r.produced_s is not None]
        seconds.append(
            {
                "produced_s": second,
                "n": len(got),
                "p50_ms": rounded_percentile(lat, 50),
                "max_ms": round(max(lat)),
                "last_received_s": round(max(r.received_s for r in got) - began, 2),
            }
        )
    return {
        "deaths_s": [round(at - began, 2) for at, _ in deaths],
        "restarts_s": [round(at - began, 2) for at in restarts],
        "convicted_s": round(convicted_at - began, 2) if convicted_at is not None else None,
        "per_second": seconds,
    }


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    count = scaled(MESSAGES, ctx.scale, floor=600)
    pill = count // 3
    with_pill = _run(ctx, count, pill)
    without = _run(ctx, count, None)
    return [
        {
            "name": "crash_pill",
            "messages": count,
            "with_pill": with_pill,
            "without_pill": without,
            "settings": {
                "rate_msgs_per_s": RATE,
                "latency_ms": [x * 1000 for x in LATENCY_S],
                "restart_s": RESTART_S,
                "crash_limit": CRASH_LIMIT,
                "transport": "grpc stream",
                "route": "defaults + crash_limit",
            },
        }
    ]
