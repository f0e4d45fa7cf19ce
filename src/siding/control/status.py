"""Pure: the JSON documents of ``/health`` and ``/status`` from a metrics snapshot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from siding import naming
from siding.control.kafka_view import RouteKafka
from siding.pipeline.driver.metrics import LaneMetrics, Snapshot

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class QueryHealth:
    """One streaming query (a route's lane) as the driver sees it."""

    name: str
    active: bool
    error: str | None = None


def health_document(
    queries: Sequence[QueryHealth], *, idle_ok: bool = False
) -> tuple[int, dict[str, Any]]:
    """200 when there is at least one query (or none is expected: ``idle_ok``, a siding that
    waits for routes made through the API) and every query is active, else 503."""
    healthy = (bool(queries) or idle_ok) and all(q.active for q in queries)
    body = {
        "status": "ok" if healthy else "unavailable",
        "queries": [_query(q) for q in queries],
    }
    return (200 if healthy else 503), body


def ready_document(
    queries: Sequence[QueryHealth], *, idle_ok: bool = False, draining: bool = False
) -> tuple[int, dict[str, Any]]:
    """``/ready``: ``/health``'s answer, except 503 from the moment a drain began (a stop is on
    its way: a load balancer should send nothing new, while the process, still healthy, goes on
    finishing its calls)."""
    code, body = health_document(queries, idle_ok=idle_ok)
    if draining:
        return 503, {**body, "status": "draining"}
    return code, body


def _query(q: QueryHealth) -> dict[str, Any]:
    out: dict[str, Any] = {"name": q.name, "active": q.active}
    if q.error:
        out["error"] = q.error
    return out


def lane_document(lane: int, metrics: LaneMetrics, rate: float) -> dict[str, Any]:
    latency = metrics.latency
    return {
        "lane": lane,
        "label": naming.lane_label(lane),
        "records": metrics.counts.records,
        "acked": metrics.counts.acked,
        "to_lane": metrics.counts.to_lane,
        "to_dlq": metrics.counts.to_dlq,
        "parked": metrics.counts.parked,
        "held": metrics.counts.held,
        "outputs": metrics.counts.outputs,
        "batches": metrics.batches,
        "rate_per_s": round(rate, 3),
        "last_batch_s": round(metrics.last_batch_s, 3),
        "in_flight_last_batch": metrics.last_in_flight,
        "max_in_flight": metrics.max_in_flight,
        "breaker": metrics.breaker.value,
        "breaker_transitions": [
            {"at_ms": round(at * 1000), "from": before, "to": after, "where": where}
            for at, before, after, where in metrics.breaker_history
        ],
        "latency_s": {
            "count": latency.count,
            "mean": round(latency.sum_s / latency.count, 6) if latency.count else 0.0,
            **{f"p{round(q * 100)}": latency.quantile(q) for q in QUANTILES},
            "max": latency.max_s,
        },
        "outcomes": {kind.value: n for kind, n in sorted(metrics.outcomes.items(), key=_kind)},
        "dead_reasons": dict(sorted(metrics.dead_reasons.items())),
        "suspects": {
            "suspected": metrics.suspected,
            "isolations": metrics.isolations,
            "convicted": metrics.convicted,
        },
        "holdouts": {
            "moved_on": metrics.holdouts,
            "latest": [{"id": i, "reason": r} for i, r in metrics.recent_holdouts],
        },
    }


def _kind(item: tuple[Any, int]) -> str:
    return str(item[0].value)


def kafka_document(facts: RouteKafka) -> dict[str, Any]:
    """What the driver last read from Kafka about a route: lag per partition (largest first),
    each lane's backlog and next due time, the DLQ's size and latest letters."""
    partitions = sorted(facts.partitions, key=lambda p: (-p.lag, p.topic, p.partition))
    return {
        "polled_at_ms": facts.polled_at_ms,
        "offered_per_s": None if facts.offered_per_s is None else round(facts.offered_per_s, 3),
        "error": facts.error,
        # Calls open at the consumers now, summed over every worker (siding.pipeline.executor.live).
        "in_flight": {
            "total": sum(n for _, n in facts.in_flight),
            "by_lane": dict(facts.in_flight),
            "at_ms": facts.in_flight_at_ms,
        },
        "lag": sum(p.lag for p in facts.partitions),
        "partitions": [asdict(p) for p in partitions],
        "lanes": [asdict(lane) for lane in facts.lanes],
        "dlq": {
            "topic": facts.dlq_topic,
            "size": facts.dlq_size,
            "latest": [asdict(letter) for letter in facts.letters],
        },
    }


KafkaFacts = Callable[[str], RouteKafka | None]


def status_document(
    snapshot: Snapshot,
    queries: Sequence[QueryHealth],
    kafka: KafkaFacts | None = None,
    *,
    idle_ok: bool = False,
) -> dict[str, Any]:
    """Routes with their lanes, counts, rates and breaker; what Kafka says of each route (when
    ``kafka`` is given and has polled); the queries; the last error."""
    routes = []
    for route in snapshot.routes():
        keys = sorted(k for k in snapshot.lanes if k[0] == route)
        lanes = [lane_document(k[1], snapshot.lanes[k], snapshot.rate(k)) for k in keys]
        document: dict[str, Any] = {
            "name": route,
            "delivered": sum(lane["acked"] for lane in lanes),
            "dead_lettered": sum(lane["to_dlq"] for lane in lanes),
            "outputs": sum(lane["outputs"] for lane in lanes),
            "lanes": lanes,
        }
        pages = snapshot.pages.get(route)
        if pages is not None:  # a route with [route.dlq_page] that sent or dropped a page
            document["dlq_pages"] = {"sent": pages.sent, "dropped": pages.dropped}
        facts = kafka(route) if kafka is not None else None
        if facts is not None:
            document["kafka"] = kafka_document(facts)
        routes.append(document)
    errors = [q.error for q in queries if q.error]
    return {
        "uptime_s": round(snapshot.at - snapshot.started_at, 3),
        "healthy": health_document(queries, idle_ok=idle_ok)[0] == 200,
        "routes": routes,
        "queries": [_query(q) for q in queries],
        "last_error": snapshot.last_error or (errors[-1] if errors else None),
    }
