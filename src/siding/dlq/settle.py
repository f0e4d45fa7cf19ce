"""Settle matching letters for good: write what replays them (merge) or nothing (purge), then
their fates, then one audit event. Fates follow acknowledged writes, so a crash in between
replays a letter twice at worst and never loses one."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from siding import naming
from siding.dlq.audit import audit_event, audit_record, who
from siding.dlq.fate import Fate, fate_record
from siding.dlq.filters import LetterFilter
from siding.dlq.read import DlqScope, iter_letters
from siding.dlq.replay import Letter, chunk_size, pause_s
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics, with_retries
from siding.routing.producer import DurableProducer, OutRecord

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

T = TypeVar("T")


def ensure_state_topics(scope: DlqScope) -> None:
    """Create the route's fate and audit topics if missing, as siding.naming lists them."""
    admin = admin_client({k: str(v) for k, v in scope.client_conf.items()})
    owned = naming.topics_of(scope.route)
    wanted = (owned.state(naming.DLQ_FATE), owned.state(naming.AUDIT))
    specs = [TopicSpec(t.name, t.partitions(), t.config()) for t in wanted]
    with_retries(lambda: ensure_topics(admin, specs))


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


@dataclass(frozen=True)
class Settlement:
    """What one merge or purge does: ``replay`` builds a letter's replay record (merge only)."""

    fate: Fate
    command: str
    replay: Callable[[Letter, int], OutRecord] | None = None
    to: str = ""
    rate: float | None = None
    extra: dict[str, object] = field(default_factory=dict)


def settle(
    scope: DlqScope,
    frame: DataFrame,
    chosen: LetterFilter,
    plan: Settlement,
    *,
    on_progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Settle every letter of ``frame`` (already filtered and without fates); the count done."""
    ensure_state_topics(scope)
    producer = DurableProducer(scope.client_conf)
    # --to origin writes onto the source topic, on the cluster the route reads.
    back = DurableProducer(scope.origin_conf) if scope.origin_conf is not None else producer
    by = who()
    done, status = 0, "failed"
    started = time.monotonic()
    try:
        for chunk in batched(iter_letters(frame, scope.dlq_topic), chunk_size(plan.rate)):
            time.sleep(pause_s(started, done, plan.rate, time.monotonic()))
            now_ms = round(clock() * 1000)
            records = [plan.replay(c, now_ms) for c in chunk] if plan.replay is not None else []
            if records:
                origin = [r for r in records if scope.route.reads(r.topic)]
                if origin:
                    back.write(origin)
                if len(origin) < len(records):
                    producer.write([r for r in records if not scope.route.reads(r.topic)])
            # Each fate names the topic its letter went to (origin topics differ per letter).
            into = [r.topic for r in records] or [plan.to] * len(chunk)
            fates = [
                fate_record(scope.fate_topic, c.ref, plan.fate, at_ms=now_ms, by=by, to=to)
                for c, to in zip(chunk, into, strict=True)
            ]
            producer.write(fates)
            done += len(chunk)
            if on_progress is not None:
                on_progress(len(chunk))
        status = "ok"
    finally:
        event = audit_event(
            at_ms=round(clock() * 1000),
            by=by,
            command=plan.command,
            route=scope.route.name,
            dlq_topic=scope.dlq_topic,
            filter_=chosen.describe(),
            count=done,
            status=status,
            extra={"to": plan.to, **plan.extra} if plan.to else plan.extra,
        )
        producer.write([audit_record(scope.audit_topic, event)])
        if back is not producer:
            back.close()
    return done
