"""Helpers for the DLQ tool tests: a route config and dead letters written the pipeline's way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from siding import naming
from siding.config import SidingConfig, parse_config
from siding.devkit.harness import config_text
from siding.devkit.wait import wait_until
from siding.dlq.read import DlqScope, open_scope
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics, existing_topics
from siding.model import Delivery, Headers, LaneHop, delivery_id
from siding.routing.producer import DurableProducer
from siding.routing.records import dlq_record
from siding.steps import ToDlq

HOUR_MS = 3_600_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Spec:
    """One dead letter to write: source offset, key, value, reason, when it died."""

    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    died_at_ms: int
    attempt: int = 1
    lane: int = 0
    headers: Headers = ()


def make_config(bootstrap: str, source: str, *, lanes: bool = True) -> SidingConfig:
    route: dict[str, object] = {
        "name": source,
        "topic": source,
        "group": f"{source}-g",
        "endpoint": "grpc://127.0.0.1:9",
    }
    if lanes:
        route["lanes"] = [{"delay": "1s"}, {"delay": "2s"}]
    return parse_config(config_text(bootstrap, route, checkpoint_dir="/tmp/unused"))


def create_dlq(config: SidingConfig) -> str:
    route = config.route[0]
    topics = [naming.route_dlq(route), *route.source_topics, *naming.route_lane_topics(route)]
    admin = admin_client({"bootstrap.servers": config.kafka.bootstrap})
    ensure_topics(admin, [TopicSpec(t) for t in topics])
    # Metadata reaches every client a moment after creation.
    wait_until(lambda: set(topics) <= set(existing_topics(admin)), what=f"topics {topics}")
    return naming.route_dlq(route)


def write_letters(config: SidingConfig, specs: Sequence[Spec]) -> None:
    route = config.route[0]
    dlq = create_dlq(config)
    records = []
    for s in specs:
        delivery = Delivery(
            id=delivery_id(route.source_topics[0], 0, s.offset),
            topic=route.source_topics[0],
            partition=0,
            offset=s.offset,
            key=s.key,
            value=s.value,
            headers=s.headers,
            timestamp_ms=s.died_at_ms - 60_000,
            attempt=s.attempt,
            lane=s.lane,
        )
        hops = tuple(LaneHop(k, k + 1, s.died_at_ms - 1000, "retry") for k in range(s.lane))
        records.append(
            dlq_record(
                delivery,
                ToDlq(s.reason),
                hops=hops,
                now_ms=s.died_at_ms,
                route=route.name,
                dlq_topic=dlq,
            )
        )
    DurableProducer(config.kafka.client_config()).write(records)


def scope_of(config: SidingConfig) -> DlqScope:
    return open_scope(config, config.route[0].name)
