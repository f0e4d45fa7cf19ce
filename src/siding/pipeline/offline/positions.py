"""Pure: where a route's source stands, where a reset takes it, and what a group moved by
another tool means at start (docs/operations.md, "Moving a route's offsets").

Offsets are Kafka's "next record to read". A route's position is its main lane's checkpoint
(the end offsets of its last committed batch); its consumer group mirrors it for lag tools.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from siding.config import parse_duration
from siding.errors import OffsetsError
from siding.kafka.admin import Committed

# siding stores ``siding:<what>`` as the metadata of its own group commits; Kafka's own tool
# (kafka-consumer-groups --reset-offsets) and other clients store none.
MARK_PREFIX = "siding:"

Extents = Mapping[int, tuple[int, int]]
TargetKind = Literal["earliest", "latest", "datetime", "offsets"]


def mark(what: str) -> str:
    """The metadata of a group commit siding makes: ``siding:batch=42``, ``siding:reset``."""
    return f"{MARK_PREFIX}{what}"


def by_siding(metadata: str) -> bool:
    return metadata.startswith(MARK_PREFIX)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class Target:
    """Where a reset takes the route: ``earliest``, ``latest``, the first record at or after
    ``at_ms`` (``datetime``), or explicit ``offsets`` (the partitions not named stay)."""

    kind: TargetKind
    at_ms: int = 0
    offsets: Mapping[int, int] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "datetime":
            return f"to-datetime {iso(self.at_ms)}"
        if self.kind == "offsets":
            return "to-offset " + ",".join(f"{p}:{o}" for p, o in sorted(self.offsets.items()))
        return f"to-{self.kind}"


def parse_offsets(text: str) -> dict[int, int]:
    """``--to-offset``: ``P:O[,P:O...]`` (partition:offset), each partition once."""
    found: dict[int, int] = {}
    for item in (part.strip() for part in text.split(",")):
        match = re.fullmatch(r"(\d+):(\d+)", item)
        if match is None:
            raise OffsetsError(
                f"--to-offset {text!r}: {item!r} is not PARTITION:OFFSET (e.g. 0:1200,1:980)"
            )
        partition, offset = int(match.group(1)), int(match.group(2))
        if partition in found:
            raise OffsetsError(f"--to-offset {text!r}: partition {partition} is given twice")
        found[partition] = offset
    return found


def parse_datetime(text: str) -> int:
    """``--to-datetime``: epoch ms of an ISO-8601 time, UTC unless it names a zone."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise OffsetsError(
            f"--to-datetime {text!r} is not an ISO time (e.g. 2026-01-31T12:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)


def parse_age(text: str, now_ms: int) -> int:
    """``--by-duration``: epoch ms that long before ``now_ms`` (``2h``, ``30m``, ``1d``)."""
    try:
        return now_ms - round(parse_duration(text) * 1000)
    except ValueError as exc:
        raise OffsetsError(f"--by-duration {exc}") from None


def targets(target: Target, extents: Extents, by_time: Mapping[int, int | None]) -> dict[int, int]:
    """Partition -> the offset ``target`` names; ``by_time`` holds the first offset at or after
    ``target.at_ms`` per partition (``None`` when no record is that late: the log end, as
    Kafka's own tool does). An offset outside a partition's log is refused, not clamped."""
    if target.kind == "earliest":
        return {p: low for p, (low, _) in extents.items()}
    if target.kind == "latest":
        return {p: high for p, (_, high) in extents.items()}
    if target.kind == "datetime":
        chosen = {p: by_time.get(p) for p in extents}
        return {p: high if (at := chosen[p]) is None else at for p, (_, high) in extents.items()}
    named: dict[int, int] = {}
    for p, offset in sorted(target.offsets.items()):
        if p not in extents:
            known = ", ".join(str(q) for q in sorted(extents))
            raise OffsetsError(f"--to-offset: partition {p} does not exist (partitions: {known})")
        named[p] = within(p, offset, extents[p], "--to-offset")
    return named


def within(partition: int, offset: int, extent: tuple[int, int], what: str) -> int:
    """``offset`` when the partition's log holds it (log end included), else an error."""
    low, high = extent
    if offset < low:
        raise OffsetsError(
            f"{what}: partition {partition} offset {offset} is before the log start {low}"
            f" (records below it were deleted; the partition holds {low}..{high})"
        )
    if offset > high:
        raise OffsetsError(
            f"{what}: partition {partition} offset {offset} is past the log end {high}"
            f" (the partition holds {low}..{high})"
        )
    return offset


@dataclass(frozen=True, slots=True)
class Row:
    """One partition: where the checkpoint and the group stand, and where the route goes."""

    partition: int
    log_start: int
    log_end: int
    checkpoint: int | None
    group: int | None
    group_by_siding: bool | None
    new: int | None
    # The route has a checkpoint position (then it moves too; else the group alone).
    checkpointed: bool = True

    @property
    def position(self) -> int | None:
        """Where the route starts now: its checkpoint, else its group."""
        return self.checkpoint if self.checkpoint is not None else self.group

    @property
    def lag(self) -> int | None:
        return None if self.position is None else max(0, self.log_end - self.position)

    @property
    def moves(self) -> bool:
        """The checkpoint or the group is not yet at ``new``."""
        if self.new is None:
            return False
        return self.group != self.new or (self.checkpointed and self.checkpoint != self.new)


@dataclass(frozen=True, slots=True)
class Plan:
    rows: tuple[Row, ...]

    @property
    def moves(self) -> bool:
        return any(row.moves for row in self.rows)

    def new_offsets(self) -> dict[int, int]:
        """Partition -> the route's position once the plan is carried out."""
        return {r.partition: r.new for r in self.rows if r.new is not None}


def plan(
    extents: Extents,
    checkpoint: Mapping[int, int] | None,
    group: Mapping[int, Committed],
    chosen: Mapping[int, int] | None = None,
) -> Plan:
    """Old -> new per partition of the topic. Partitions ``chosen`` does not name keep the
    route's current position; without ``chosen`` (``offsets show``) nothing moves."""
    rows = []
    for p, (low, high) in sorted(extents.items()):
        at = None if checkpoint is None else checkpoint.get(p)
        committed = group.get(p)
        current = at if checkpoint is not None else (committed.offset if committed else None)
        new = current if chosen is None or p not in chosen else chosen[p]
        rows.append(
            Row(
                partition=p,
                log_start=low,
                log_end=high,
                checkpoint=at,
                group=committed.offset if committed else None,
                group_by_siding=by_siding(committed.metadata) if committed else None,
                new=new,
                checkpointed=checkpoint is not None,
            )
        )
    return Plan(tuple(rows))


@dataclass(frozen=True, slots=True)
class StartVerdict:
    """What the group says at start, against the checkpoint: ``moved`` partitions were
    committed by another tool to another offset (partition -> that offset); ``behind`` ones
    hold an older commit of siding's own, or none (partition -> the checkpoint's offset)."""

    moved: Mapping[int, int] = field(default_factory=dict)
    behind: Mapping[int, int] = field(default_factory=dict)


def start_verdict(checkpoint: Mapping[int, int], group: Mapping[int, Committed]) -> StartVerdict:
    """Compare the group's commits with the checkpoint before a route starts.

    siding commits the group after the checkpoint, so the group may trail it after a crash:
    that commit carries siding's mark and is simply made again. A commit without the mark that
    differs was made by someone else (``kafka-consumer-groups --reset-offsets``) while the route
    was stopped; siding honours it (docs/operations.md).
    """
    moved: dict[int, int] = {}
    behind: dict[int, int] = {}
    for p, committed in sorted(group.items()):
        if committed.offset != checkpoint.get(p) and not by_siding(committed.metadata):
            moved[p] = committed.offset
    for p, at in sorted(checkpoint.items()):
        found = group.get(p)
        if p not in moved and (found is None or found.offset != at):
            behind[p] = at
    return StartVerdict(moved, behind)


def describe_moves(rows: Mapping[int, tuple[int | None, int]]) -> str:
    """``partition 0 120 -> 80, partition 1 (none) -> 7`` for log lines and errors."""
    return ", ".join(
        f"partition {p} {'(none)' if old is None else old} -> {new}"
        for p, (old, new) in sorted(rows.items())
    )


def audit_event(
    *,
    at_ms: int,
    by: str,
    command: str,
    route: str,
    topic: str,
    group: str,
    checkpoint: str,
    batch: int | None,
    target: str,
    plan: Plan,
) -> dict[str, object]:
    """The audit event of a move (``offsets reset`` or ``offsets adopt``): every partition's
    checkpoint and group offsets before, and where the route starts after."""
    return {
        "at": iso(at_ms),
        "at_ms": at_ms,
        "who": by,
        "command": command,
        "route": route,
        "topic": topic,
        "group": group,
        "checkpoint": checkpoint,
        "batch": batch,
        "target": target,
        "partitions": [
            {"partition": r.partition, "checkpoint": r.checkpoint, "group": r.group, "new": r.new}
            for r in plan.rows
        ],
        "count": sum(1 for r in plan.rows if r.moves),
    }
