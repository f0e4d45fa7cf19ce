"""Move a route's source position: its main lane's checkpoint and its consumer group together.

Used by ``siding offsets show | reset`` and, at start, to honour a group moved by another tool
while the route was stopped. The decisions are in ``siding.pipeline.offline.positions``; this module
reads and writes (docs/operations.md, "Moving a route's offsets").

A move is written down first (``<checkpoint_dir>/<route>/siding-move.json``), then carried out:
a committed batch appended to the checkpoint, then the group commit. One interrupted half-way is
finished by the next ``siding run`` or ``siding offsets reset`` before anything else.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from siding import naming
from siding.config import RouteConfig, SidingConfig
from siding.errors import CheckpointError, OffsetsError
from siding.kafka.admin import (
    Committed,
    TopicSpec,
    admin_client,
    cluster_id,
    commit_offsets,
    committed_positions,
    ensure_topics,
    existing_topics,
)
from siding.kafka.extent import extents, offsets_at
from siding.pipeline.offline import offset_log, owner, positions
from siding.pipeline.offline.checkpoint_root import route_place
from siding.pipeline.offline.route_lock import CheckpointBusy, RouteLock, holder
from siding.pipeline.offline.storage import Place
from siding.routing.audit import audit_record, who
from siding.routing.producer import DurableProducer

log = logging.getLogger("siding.offsets")

MOVE_FILE = "siding-move.json"
MAIN = naming.lane_label(0)


def route_dir_of(config: SidingConfig, route: RouteConfig) -> Place:
    """The route's checkpoint folder, local or through Hadoop's FileSystem API."""
    return route_place(config, route.name)


def _client_conf(config: SidingConfig, route: RouteConfig) -> dict[str, str]:
    """The settings of the cluster the route reads (its group's offsets are there too)."""
    return {k: str(v) for k, v in config.kafka.cluster_for(route, "source").client_config().items()}


@dataclass(frozen=True)
class RouteOffsets:
    """A route's source position as ``offsets show`` and a reset see it (a pinned route's
    partitions only: ``extents`` and ``group`` hold no other)."""

    route: RouteConfig
    route_dir: Place
    extents: Mapping[int, tuple[int, int]]
    position: offset_log.Position | None
    group: Mapping[int, Committed]
    running: str | None
    pending_move: bool
    # The source topic looked at (a route with several is looked at one topic at a time);
    # empty: the route's only topic.
    topic: str = ""

    @property
    def source(self) -> str:
        return self.topic or self.route.single_topic or ""

    @property
    def query_dir(self) -> Place:
        return self.route_dir / MAIN

    @property
    def checkpoint(self) -> dict[int, int] | None:
        if self.position is None:
            return None
        return dict(self.position.offsets.get(self.source, {}))


def source_topics(config: SidingConfig, route: RouteConfig) -> tuple[str, ...]:
    """The route's source topics: those it names, or those that match its pattern now or that
    its checkpoint has positions of."""
    if route.topic_pattern is None:
        return route.source_topics
    client_conf = _client_conf(config, route)
    found = set(existing_topics(admin_client(client_conf)))
    position = offset_log.read_position(route_dir_of(config, route) / MAIN)
    found.update(position.offsets if position is not None else ())
    return route.matching(found)


def pick_topic(config: SidingConfig, route: RouteConfig, topic: str | None) -> str:
    """The one source topic an offsets command works on: ``topic`` (one of the route's), or
    the route's only topic."""
    if topic is not None:
        if not route.reads(topic):
            raise OffsetsError(
                f"route {route.name} does not read topic {topic!r} (it reads {route.source_label})"
            )
        return topic
    if route.single_topic is not None:
        return route.single_topic
    topics = ", ".join(source_topics(config, route)) or "none yet"
    raise OffsetsError(
        f"route {route.name} reads several topics ({topics}): give --topic to say which one"
    )


def look(
    config: SidingConfig, route: RouteConfig, *, locked: bool = False, topic: str | None = None
) -> RouteOffsets:
    """Read the checkpoint, the group and the topic's extent (nothing is written). A checkpoint
    of another route, topic or cluster is refused as ``siding run`` refuses it. ``locked``: the
    caller holds the route's lock (nobody else runs it). ``topic``: which source topic, for a
    route that reads several."""
    route_dir = route_dir_of(config, route)
    client_conf = _client_conf(config, route)
    current = owner.Owner(route.name, route.source_label, cluster_id(admin_client(client_conf)))
    owner.check(route_dir, current, MAIN)
    source = pick_topic(config, route, topic)
    return RouteOffsets(
        route=route,
        route_dir=route_dir,
        extents=route.only_pinned(source, extents(client_conf, source)),
        position=offset_log.read_position(route_dir / MAIN),
        group=route.only_pinned(source, committed_positions(client_conf, route.group, source)),
        running=None if locked else holder(route_dir),
        pending_move=(route_dir / MOVE_FILE).exists(),
        topic=source,
    )


@dataclass(frozen=True)
class Move:
    """What one move writes: a committed batch (``batch`` is ``None`` when the route has no
    checkpoint position: then the group alone), and the group's offsets."""

    group: str
    topic: str
    offsets: Mapping[int, int]
    mark: str
    batch: int | None = None
    offsets_text: str = ""
    commit_text: str = ""
    # A checkpoint folder without any batch keeps the offsets the source started from: it is
    # set aside under this name, so the route starts from the group.
    set_aside: str | None = None

    def to_json(self) -> str:
        data = {**asdict(self), "offsets": {str(p): o for p, o in self.offsets.items()}}
        return json.dumps({"version": 1, **data}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Move:
        data = json.loads(text)
        data.pop("version", None)
        data["offsets"] = {int(p): int(o) for p, o in data["offsets"].items()}
        return cls(**data)


def prepare(view: RouteOffsets, new: Mapping[int, int], mark: str) -> Move:
    route = view.route
    if view.position is None:
        aside = None
        if view.query_dir.exists():
            aside = f"{MAIN}.set-aside-{time.strftime('%Y%m%dT%H%M%S')}"
        return Move(route.group, view.source, dict(new), mark, set_aside=aside)
    entry = offset_log.OffsetEntry(
        offset_log.latest_entry(view.query_dir).metadata, view.position.offsets
    ).moved(view.source, dict(new))
    return Move(
        route.group,
        view.source,
        dict(new),
        mark,
        batch=view.position.next_batch,
        offsets_text=entry.render(),
        commit_text=offset_log.latest_commit(view.query_dir),
    )


def carry_out(route_dir: Place, move: Move, admin: Any) -> None:
    """Write the move down, then the checkpoint, then the group; then strike it off."""
    (route_dir / MOVE_FILE).replace(move.to_json())
    _apply(route_dir, move, admin)


def _apply(route_dir: Place, move: Move, admin: Any) -> None:
    query = route_dir / MAIN
    if move.batch is not None:
        offset_log.write_batch(query, move.batch, move.offsets_text, move.commit_text)
    elif move.set_aside is not None and query.exists():
        query.rename(route_dir / move.set_aside)
    commit_offsets(admin, move.group, move.topic, move.offsets, metadata=move.mark)
    (route_dir / MOVE_FILE).unlink()


def finish_interrupted(route_dir: Place, admin: Any) -> Move | None:
    """Carry out a move that was written down but not finished (idempotent steps)."""
    intent = route_dir / MOVE_FILE
    try:
        move = Move.from_json(intent.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{intent} is unreadable ({exc}): remove it to go on") from exc
    log.warning("finishing an interrupted move of %s (%s)", route_dir, move.mark)
    _apply(route_dir, move, admin)
    return move


def audit(config: SidingConfig, route: RouteConfig, event: Mapping[str, object]) -> None:
    """Append ``event`` to the route's audit topic (created if missing, on the cluster the
    route writes to): offsets moved here, backfills in ``siding.pipeline.driver.backfill``."""
    client_conf = config.kafka.cluster_for(route, "write").client_config()
    topic = naming.topics_of(route).state(naming.AUDIT)
    ensure_topics(
        admin_client({k: str(v) for k, v in client_conf.items()}),
        [TopicSpec(topic.name, topic.partitions(), topic.config())],
    )
    producer = DurableProducer(client_conf)
    try:
        producer.write([audit_record(topic.name, event)])
    finally:
        producer.close()


def _audit_failed(config: SidingConfig, route: RouteConfig, event: Mapping[str, object]) -> None:
    try:
        audit(config, route, {**event, "status": "failed"})
    except Exception:  # the move's own error is the one to report
        log.exception("route %s: the audit event of a failed move was not written", route.name)


def _event(
    command: str, view: RouteOffsets, plan: positions.Plan, move: Move, target: str
) -> dict[str, object]:
    return positions.audit_event(
        at_ms=round(time.time() * 1000),
        by=who(),
        command=command,
        route=view.route.name,
        topic=view.source,
        group=view.route.group,
        checkpoint=str(view.query_dir),
        batch=move.batch,
        target=target,
        plan=plan,
    )


@dataclass(frozen=True)
class ResetOutcome:
    view: RouteOffsets
    plan: positions.Plan
    executed: bool
    batch: int | None = None


def reset(
    config: SidingConfig,
    route_name: str,
    target: positions.Target,
    *,
    execute: bool,
    topic: str | None = None,
) -> ResetOutcome:
    """Plan a reset of ``route_name``'s source to ``target``; with ``execute``, carry it out
    (refused while the route runs: the route's lock says so). ``topic``: which source topic,
    for a route that reads several."""
    route = config.route_named(route_name)
    route_dir = route_dir_of(config, route)
    client_conf = _client_conf(config, route)
    admin = admin_client(client_conf)
    lock = RouteLock(route_dir, f"siding offsets reset of route {route.name}")
    try:
        if execute:
            try:
                lock.acquire()
            except CheckpointBusy as busy:
                raise OffsetsError(
                    f"route {route.name} is running ({busy.holder}): stop it before moving its"
                    " offsets (`siding offsets show` works while it runs)"
                ) from None
            finish_interrupted(route_dir, admin)
        view = look(config, route, locked=execute, topic=topic)
        _check_pinned(route, view.source, target)
        by_time: Mapping[int, int | None] = {}
        if target.kind == "datetime":
            by_time = offsets_at(client_conf, view.source, sorted(view.extents), target.at_ms)
        chosen = positions.targets(target, view.extents, by_time)
        planned = positions.plan(view.extents, view.checkpoint, view.group, chosen)
        if not execute or not planned.moves:
            return ResetOutcome(view, planned, executed=False)
        move = prepare(view, planned.new_offsets(), positions.mark("reset"))
        event = _event("offsets reset", view, planned, move, target.describe())
        try:
            carry_out(route_dir, move, admin)
        except BaseException:
            _audit_failed(config, route, event)
            raise
        audit(config, route, {**event, "status": "ok"})
        log.info(
            "route %s: offsets reset (%s) by %s: %s",
            route.name,
            target.describe(),
            event["who"],
            positions.describe_moves(_changes(planned)),
        )
        return ResetOutcome(view, planned, executed=True, batch=move.batch)
    finally:
        lock.release()


def _check_pinned(route: RouteConfig, topic: str, target: positions.Target) -> None:
    """``--to-offset`` may name only partitions a pinned route reads (the others belong to
    other routes of its group)."""
    pinned = route.pinned(topic)
    if pinned is None or target.kind != "offsets":
        return
    for p in sorted(target.offsets):
        if p not in pinned:
            pins = ", ".join(str(q) for q in pinned)
            raise OffsetsError(
                f"--to-offset: route {route.name} is pinned to partition(s) {pins} of topic"
                f" {topic}: partition {p} is not its to move"
            )


def _changes(plan: positions.Plan) -> dict[int, tuple[int | None, int]]:
    return {r.partition: (r.position, r.new) for r in plan.rows if r.moves and r.new is not None}


def reconcile_at_start(config: SidingConfig, route: RouteConfig, admin: Any) -> None:
    """Before the route's queries start: finish an interrupted move, then compare the group
    with the checkpoint. A group moved by another tool is honoured (the checkpoint follows it,
    logged at WARNING and audited); one that trails siding's own commits is committed again."""
    route_dir = route_dir_of(config, route)
    finish_interrupted(route_dir, admin)
    position = offset_log.read_position(route_dir / MAIN)
    if position is None:
        return  # no checkpoint position: the route starts from its group (query.starting)
    # Each source topic the checkpoint has a position of, one after the other (a move of one
    # writes a batch: the next one reads the checkpoint again).
    for topic in sorted(t for t in position.offsets if route.reads(t)):
        _reconcile_topic(config, route, admin, route_dir, topic)


def _reconcile_topic(
    config: SidingConfig, route: RouteConfig, admin: Any, route_dir: Place, topic: str
) -> None:
    position = offset_log.read_position(route_dir / MAIN)
    if position is None:
        return
    client_conf = _client_conf(config, route)
    checkpoint = position.offsets.get(topic, {})
    # A pinned route's partitions only: another route of the group owns the others.
    group = route.only_pinned(topic, committed_positions(client_conf, route.group, topic))
    verdict = positions.start_verdict(checkpoint, group)
    if verdict.moved:
        extent = route.only_pinned(topic, extents(client_conf, topic))
        view = RouteOffsets(
            route, route_dir, extent, position, group, None, pending_move=False, topic=topic
        )
        _adopt(config, view, verdict.moved, admin)
    elif verdict.behind:
        commit_offsets(admin, route.group, topic, verdict.behind, metadata=positions.mark("start"))
        log.info(
            "route %s: group %s trailed the checkpoint (a commit of siding's did not land);"
            " committed %s of topic %s",
            route.name,
            route.group,
            ", ".join(f"partition {p} at {o}" for p, o in sorted(verdict.behind.items())),
            topic,
        )


def _on_topic(view: RouteOffsets) -> str:
    """`` of topic T`` for a route that reads several topics, else nothing."""
    return "" if view.route.single_topic is not None else f" of topic {view.source}"


def _adopt(config: SidingConfig, view: RouteOffsets, moved: Mapping[int, int], admin: Any) -> None:
    route = view.route
    checkpoint = view.checkpoint or {}
    changes = {p: (checkpoint.get(p), o) for p, o in moved.items()}
    what = (
        f"route {route.name}: group {route.group} was moved outside siding while the route was"
        f" stopped ({positions.describe_moves(changes)}{_on_topic(view)})"
    )
    for p, offset in sorted(moved.items()):
        try:
            if p not in view.extents:
                raise OffsetsError(f"partition {p} does not exist")
            positions.within(p, offset, view.extents[p], "the group")
        except OffsetsError as exc:
            raise CheckpointError(
                f"{what}, but {exc}: move the route with `siding offsets reset --route"
                f" {route.name}` (docs/operations.md)"
            ) from None
    new = {**checkpoint, **moved}
    planned = positions.plan(view.extents, checkpoint, view.group, new)
    move = prepare(view, new, positions.mark("adopt"))
    log.warning("%s: siding starts from the group's offsets (the checkpoint follows them)", what)
    carry_out(view.route_dir, move, admin)
    event = _event("offsets adopt", view, planned, move, "the group's offsets")
    audit(config, route, {**event, "status": "ok"})
