"""Pure: what ``siding backfill`` reads and how far it got (docs/backfill.md).

A bound (``--from`` / ``--to``) is a time (ISO or an age), ``earliest``, ``latest``, or offsets
(``P:O,...`` for a route with one topic, ``TOPIC:P:O,...`` for any). Bounds resolve to one range
``[start, end)`` per topic partition; the job reads the ranges in chunks and records, after each
chunk, the next offset of every partition (the resume state), so a run that stopped goes on from
there.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from siding.config import parse_duration
from siding.errors import SidingError

TopicPartition = tuple[str, int]
Ranges = dict[TopicPartition, tuple[int, int]]
STATE_VERSION = 1


class BackfillError(SidingError):
    """A backfill that cannot run as asked; the message says why."""


@dataclass(frozen=True)
class Bound:
    """One end of the range: ``kind`` is ``time`` (``at_ms``), ``earliest``, ``latest`` or
    ``offsets`` (``offsets``: topic -> partition -> offset)."""

    kind: str
    at_ms: int = 0
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    text: str = ""


_OFFSET = re.compile(r"(?:(?P<topic>[A-Za-z0-9._-]+):)?(?P<p>\d+):(?P<o>\d+)")


def parse_bound(text: str, *, single_topic: str | None, now_ms: int, option: str) -> Bound:
    """``--from`` / ``--to`` as given; an error names the option and the value."""
    value = text.strip()
    if value in ("earliest", "latest"):
        return Bound(value, text=value)
    if re.fullmatch(r"[A-Za-z0-9._:-]*\d+:\d+(,[A-Za-z0-9._:-]*\d+:\d+)*", value) and not re.match(
        r"\d{4}-\d\d-\d\d", value
    ):
        return Bound("offsets", offsets=_offsets(value, single_topic, option), text=value)
    if re.fullmatch(r"(\d+(ms|[dhms]))+", value):
        return Bound("time", at_ms=now_ms - round(parse_duration(value) * 1000), text=value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BackfillError(
            f"{option} {text!r}: give an ISO time (2026-01-31T12:00:00Z), an age (2h),"
            " earliest, latest, or offsets (P:O,... or TOPIC:P:O,...)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return Bound("time", at_ms=round(parsed.timestamp() * 1000), text=value)


def _offsets(value: str, single_topic: str | None, option: str) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for part in value.split(","):
        match = _OFFSET.fullmatch(part)
        if match is None:
            raise BackfillError(f"{option} {value!r}: {part!r} is not P:O or TOPIC:P:O")
        topic = match["topic"] or single_topic
        if topic is None:
            raise BackfillError(
                f"{option} {value!r}: the route reads several topics: write TOPIC:P:O"
            )
        out.setdefault(topic, {})[int(match["p"])] = int(match["o"])
    return out


def resolve(
    start: Bound,
    end: Bound,
    extents: Mapping[str, Mapping[int, tuple[int, int]]],
    by_time: Mapping[tuple[str, int], Mapping[int, int | None]],
) -> Ranges:
    """Per topic partition, ``[start, end)`` within the log; empty ranges are left out.

    ``extents``: topic -> partition -> (log start, log end). ``by_time``: (topic, at_ms) ->
    partition -> the first offset at or after that time (``None``: no record that late, so the
    log end). A partition that offsets do not name starts at its log end (nothing) for
    ``--from`` and ends at its log end for ``--to``."""
    for bound in (start, end):
        for topic in bound.offsets:
            if topic not in extents:
                raise BackfillError(f"offsets {bound.text!r}: the route does not read {topic}")
    ranges: Ranges = {}
    for topic, partitions in sorted(extents.items()):
        for partition, (low, high) in sorted(partitions.items()):
            first = _position(start, topic, partition, (low, high), by_time)
            last = _position(end, topic, partition, (low, high), by_time)
            first = max(first, low)
            last = min(last, high)
            if last > first:
                ranges[(topic, partition)] = (first, last)
    return ranges


def _position(
    bound: Bound,
    topic: str,
    partition: int,
    extent: tuple[int, int],
    by_time: Mapping[tuple[str, int], Mapping[int, int | None]],
) -> int:
    low, high = extent
    if bound.kind == "earliest":
        return low
    if bound.kind == "latest":
        return high
    if bound.kind == "time":
        found = by_time.get((topic, bound.at_ms), {}).get(partition)
        return high if found is None else found
    named = bound.offsets.get(topic, {})
    if partition not in named:
        return high
    offset = named[partition]
    if not low <= offset <= high:
        raise BackfillError(
            f"offsets {bound.text!r}: {topic} partition {partition} holds {low}..{high},"
            f" not {offset}"
        )
    return offset


def check_partitions(bound: Bound, extents: Mapping[str, Mapping[int, tuple[int, int]]]) -> None:
    """Offsets naming a partition a topic does not have (or a pinned route does not read:
    ``extents`` holds its partitions only) are an error, not ignored."""
    for topic, named in bound.offsets.items():
        for partition in named:
            if partition not in (known := extents.get(topic, {})):
                read = ", ".join(str(p) for p in sorted(known)) or "none"
                raise BackfillError(
                    f"offsets {bound.text!r}: {topic} has no partition {partition} the route"
                    f" reads (it reads {read})"
                )


def chunks(
    ranges: Mapping[TopicPartition, tuple[int, int]],
    done: Mapping[TopicPartition, int],
    per_chunk: int,
) -> list[Ranges]:
    """The ranges still to read (from ``done``, the next offset of each partition), cut into
    chunks of about ``per_chunk`` records spread over the partitions, in offset order."""
    left = {
        tp: (max(start, done.get(tp, start)), end)
        for tp, (start, end) in sorted(ranges.items())
        if max(start, done.get(tp, start)) < end
    }
    if not left:
        return []
    step = max(1, math.ceil(per_chunk / len(left)))
    out: list[Ranges] = []
    while left:
        chunk: Ranges = {}
        for tp, (start, end) in list(left.items()):
            stop = min(end, start + step)
            chunk[tp] = (start, stop)
            if stop >= end:
                del left[tp]
            else:
                left[tp] = (stop, end)
        out.append(chunk)
    return out


def spark_offsets(chunk: Mapping[TopicPartition, tuple[int, int]]) -> tuple[str, str]:
    """``startingOffsets`` and ``endingOffsets`` JSON for Spark's Kafka batch source."""
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, partition), (start, end) in sorted(chunk.items()):
        starting.setdefault(topic, {})[str(partition)] = start
        ending.setdefault(topic, {})[str(partition)] = end
    return json.dumps(starting), json.dumps(ending)


def total(ranges: Mapping[TopicPartition, tuple[int, int]]) -> int:
    """Offsets in the ranges: the records at most (compaction and transactions leave gaps)."""
    return sum(end - start for start, end in ranges.values())


def remaining(
    ranges: Mapping[TopicPartition, tuple[int, int]], done: Mapping[TopicPartition, int]
) -> int:
    """Offsets still to read once ``done`` (the next offset of each partition) is done."""
    left = (end - max(start, done.get(tp, start)) for tp, (start, end) in ranges.items())
    return sum(max(0, n) for n in left)


def rate_and_eta(read: int, seconds: float, left: int) -> tuple[float | None, float | None]:
    """Records per second so far and the seconds still to go at that rate."""
    if seconds <= 0 or read <= 0:
        return None, None
    rate = read / seconds
    return rate, left / rate


@dataclass
class State:
    """The resume state, kept in ``<checkpoint_dir>/<route>/backfill.json``."""

    ranges: Ranges
    done: dict[TopicPartition, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    started_at_ms: int = 0
    range_text: str = ""

    def to_json(self) -> str:
        def keyed(m: Mapping[TopicPartition, object]) -> list[list[object]]:
            return [[t, p, v] for (t, p), v in sorted(m.items())]

        data = {
            "version": STATE_VERSION,
            "range": self.range_text,
            "started_at_ms": self.started_at_ms,
            "ranges": [[t, p, s, e] for (t, p), (s, e) in sorted(self.ranges.items())],
            "done": keyed(self.done),
            "counts": self.counts,
        }
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> State:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError("not a backfill state of this version")
        return cls(
            ranges={(str(t), int(p)): (int(s), int(e)) for t, p, s, e in data["ranges"]},
            done={(str(t), int(p)): int(o) for t, p, o in data["done"]},
            counts={str(k): int(v) for k, v in data["counts"].items()},
            started_at_ms=int(data["started_at_ms"]),
            range_text=str(data["range"]),
        )
