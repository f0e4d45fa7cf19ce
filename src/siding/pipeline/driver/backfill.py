"""``siding backfill``: push a range of a route's source again, through the same dispatcher,
lanes and DLQ, as a Spark batch job beside the live route (docs/backfill.md).

The range is read in chunks (Spark's Kafka batch source, ``startingOffsets``/``endingOffsets``);
each chunk goes through the main lane's batch handler with the backfill's own ``max_in_flight``,
and after each chunk the next offset of every partition is written to
``<checkpoint_dir>/<route>/backfill.json``: a backfill that stopped (a crash, Ctrl-C) goes on
from there when the same command runs again. The last step writes an audit event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from siding import naming
from siding.config import Role, RouteConfig, SidingConfig
from siding.config.models import ParkConfig
from siding.kafka.admin import admin_client, ensure_topics, existing_topics
from siding.kafka.extent import extents, offsets_at
from siding.model import Ordering
from siding.pipeline.driver.backfill_range import (
    BackfillError,
    Bound,
    Ranges,
    State,
    check_partitions,
    chunks,
    resolve,
    spark_offsets,
    total,
)
from siding.pipeline.driver.batch import BatchSink, LaneBatchHandler
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.keystate import KeyWaits
from siding.pipeline.driver.topics import carried, topic_specs
from siding.pipeline.executor.result import TaskResult
from siding.pipeline.offline import moves
from siding.pipeline.offline.route_lock import CheckpointBusy, RouteLock
from siding.pipeline.offline.storage import Place, scheme
from siding.routing.audit import who
from siding.routing.producer import DurableProducer
from siding.steps import StepCounts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("siding.backfill")

STATE_FILE = "backfill.json"
LOCK_FILE = "backfill.lock"
DEFAULT_CHUNK = 5000
DEFAULT_MAX_IN_FLIGHT = 100
COUNTS = ("records", "acked", "laned", "dead")


@dataclass
class Progress:
    """What a run reports as it goes: records read so far (this run), the total left when it
    started, and the counts (including those of runs it resumes)."""

    total: int = 0
    resumed: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))


def backfill_route(route: RouteConfig, max_in_flight: int) -> RouteConfig:
    """The route as the backfill delivers it: its own in-flight limit, no parking (a call
    outliving its chunk would be settled by the live route's park lane, which may not run)."""
    limit = max(1, max_in_flight)
    adaptive = route.adaptive.model_copy(
        update={"min_in_flight": min(route.adaptive.min_in_flight, limit)}
    )
    return route.model_copy(
        update={"max_in_flight": limit, "park": ParkConfig(enabled=False), "adaptive": adaptive}
    )


def state_path(config: SidingConfig, route: RouteConfig) -> Place:
    return moves.route_dir_of(config, route) / STATE_FILE


def _write_state(path: Place, state: State) -> None:
    path.replace(state.to_json())  # whole or not at all (storage.py)


def plan_state(
    config: SidingConfig, route: RouteConfig, start: Bound, end: Bound, now_ms: int
) -> tuple[State, bool]:
    """The state to run from: the unfinished one of the same range (resumed), else a new one."""
    path = state_path(config, route)
    range_text = f"{start.text}..{end.text}"
    try:
        text: str | None = path.read_text()
    except FileNotFoundError:
        text = None
    if text is not None:
        try:
            state = State.from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise BackfillError(
                f"{path} is unreadable ({exc}): remove it to start afresh"
            ) from None
        if state.range_text != range_text:
            raise BackfillError(
                f"route {route.name} has an unfinished backfill of {state.range_text} ({path}):"
                " run it again with the same --from and --to to finish it, or remove the file"
            )
        return state, True
    client_conf = dict(config.kafka.cluster_for(route, "source").client_config())
    topics = moves.source_topics(config, route)
    if not topics:
        raise BackfillError(f"route {route.name}: no source topic exists ({route.source_label})")
    # A pinned route backfills its own partitions only.
    extent = {t: route.only_pinned(t, extents(client_conf, t)) for t in topics}
    for bound in (start, end):
        check_partitions(bound, extent)
    by_time: dict[tuple[str, int], Mapping[int, int | None]] = {}
    for bound in (start, end):
        if bound.kind == "time":
            for topic in topics:
                by_time[(topic, bound.at_ms)] = offsets_at(
                    client_conf, topic, sorted(extent[topic]), bound.at_ms
                )
    ranges = resolve(start, end, extent, by_time)
    counts = dict.fromkeys(COUNTS, 0)
    return State(ranges, counts=counts, started_at_ms=now_ms, range_text=range_text), False


def _ensure_route_topics(config: SidingConfig, route: RouteConfig, ranges: Ranges) -> None:
    """The lanes and the DLQ exist once the route ran; create them as its start would (sized
    and as large as its sources) if it never did."""
    read, write = (_admin(config, route, role) for role in ("source", "write"))
    present = existing_topics(read)
    sources = sorted({t for t, _ in ranges})
    partitions = max((present.get(t, 1) for t in sources), default=1)
    owned = naming.topics_of(route)
    wanted = [*owned.lanes, owned.dlq]
    ensure_topics(write, topic_specs(wanted, partitions, carried(read, sources)))


def _admin(config: SidingConfig, route: RouteConfig, role: Role) -> Any:
    conf = config.kafka.cluster_for(route, role).client_config()
    return admin_client({k: str(v) for k, v in conf.items()})


def _event(
    route: RouteConfig, state: State, status: str, max_in_flight: int, now_ms: int
) -> dict[str, object]:
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(now_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    ranges = {f"{t}/{p}": [s, e] for (t, p), (s, e) in sorted(state.ranges.items())}
    return {
        "at": at,
        "at_ms": now_ms,
        "who": who(),
        "command": "backfill",
        "route": route.name,
        "range": state.range_text,
        "offsets": ranges,
        "max_in_flight": max_in_flight,
        "status": status,
        **state.counts,
    }


@contextmanager
def _only_backfill_of(config: SidingConfig, route: RouteConfig) -> Iterator[None]:
    """Hold the route's backfill lock (``backfill.lock``, not the live route's) for the run."""
    lock = RouteLock(moves.route_dir_of(config, route), f"siding backfill {route.name}", LOCK_FILE)
    try:
        lock.acquire()
    except CheckpointBusy as busy:
        raise BackfillError(
            f"route {route.name}: another backfill of it is running ({busy.holder}):"
            " one at a time, wait for it or stop it (it resumes where it stopped)"
        ) from None
    try:
        yield
    finally:
        lock.release()


def run_backfill(
    config: SidingConfig,
    route_name: str,
    start: Bound,
    end: Bound,
    *,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    per_chunk: int = DEFAULT_CHUNK,
    spark: SparkSession | None = None,
    on_start: Callable[[Progress], None] = lambda _: None,
    on_chunk: Callable[[Progress, int], None] = lambda *_: None,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> State:
    """Backfill ``route_name`` from ``start`` to ``end``; the final state (its ``counts``).

    One backfill of a route at a time: two would read the same state file and deliver the same
    chunks, so the second is refused before it reads anything."""
    route = config.route_named(route_name)
    if route.ordering is Ordering.KEY:
        raise BackfillError(
            f"route {route.name}: backfill of a key-mode route is not supported yet"
            " (its key state is shared with the live route)"
        )
    with _only_backfill_of(config, route):
        state, resumed = plan_state(config, route, start, end, round(clock() * 1000))
        path = state_path(config, route)
        todo = chunks(state.ranges, state.done, per_chunk)
        progress = Progress(
            total=sum(total(c) for c in todo), resumed=resumed, counts=dict(state.counts)
        )
        on_start(progress)
        if not todo:
            path.unlink()
            return state
        _write_state(path, state)
        _ensure_route_topics(config, route, state.ranges)
        delivering = backfill_route(route, max_in_flight)
        # Lanes and dead letters go where the live route writes them; records come from its source.
        client_conf = dict(config.kafka.cluster_for(route, "write").client_config())
        own_session = spark is None
        if spark is None:
            from siding.pipeline.driver.session import build_session

            spark = build_session(
                config.spark.master,
                app_name=f"{config.spark.app_name}-backfill",
                extra=config.spark.conf_values(),
                jars_dir=config.spark.jars_dir,
                s3a=scheme(config.spark.checkpoint_dir) == "s3a",
            )
        results: list[TaskResult] = []

        def collect(_route: str, _lane: int, done: list[TaskResult], _seconds: float) -> None:
            results.extend(done)

        producer = DurableProducer(client_conf)
        handler = LaneBatchHandler(
            route=delivering,
            lane=0,
            client_conf=client_conf,
            # Consumer instances that joined the route are in the registry, on [kafka].
            registry_conf=config.kafka.client_config(),
            waits=KeyWaits(naming.state_topic(route.name, naming.KEYS)),
            state_producer=producer,
            stop=stop or threading.Event(),
            sink=BatchSink(collect),
            parallelism=spark.sparkContext.defaultParallelism,
            controls=RouteControls({route.name: delivering}, config.control.registry_topic),
            budget_scope="backfill",
        )
        status = "failed"
        try:
            for number, chunk in enumerate(todo):
                starting, ending = spark_offsets(chunk)
                assign = _assign(chunk)
                frame = (
                    spark.read.format("kafka")
                    .options(**config.kafka.cluster_for(route, "source").spark_options())
                    .option("assign", assign)
                    .option("startingOffsets", starting)
                    .option("endingOffsets", ending)
                    .option("includeHeaders", "true")
                    .option("failOnDataLoss", "false")
                    .load()
                )
                results.clear()
                handler(frame, number)
                counts = StepCounts.total(r.counts for r in results)
                for name, value in (
                    ("records", counts.records),
                    ("acked", counts.acked),
                    ("laned", counts.to_lane),
                    ("dead", counts.to_dlq),
                ):
                    state.counts[name] = state.counts.get(name, 0) + value
                state.done.update({tp: stop_at for tp, (_, stop_at) in chunk.items()})
                _write_state(path, state)
                progress.counts = dict(state.counts)
                on_chunk(progress, total(chunk))
            status = "ok"
        finally:
            producer.close()
            if own_session:
                spark.stop()
            event = _event(route, state, status, max_in_flight, round(clock() * 1000))
            try:
                moves.audit(config, route, event)
            except Exception:
                log.exception("route %s: the backfill's audit event was not written", route.name)
        path.unlink()
        return state


def _assign(chunk: Mapping[tuple[str, int], Any]) -> str:
    import json

    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(chunk):
        topics.setdefault(topic, []).append(partition)
    return json.dumps(topics)
