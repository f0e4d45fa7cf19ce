"""How results look: rich tables for people, one JSON object per line for programs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rich.table import Table

from siding.dlq.filters import iso, key_spec
from siding.dlq.list import LetterRow
from siding.dlq.preview import preview
from siding.dlq.stats import DlqStats

SHOWN_REASONS = 20


def _key(key: bytes | None) -> str:
    return preview(key, width=30)


def letter_json(row: LetterRow) -> dict[str, object]:
    return {
        "id": row.id,
        "topic": row.topic,
        "partition": row.partition,
        "offset": row.offset,
        "key": key_spec(row.key) if row.key is not None else None,
        "reason": row.reason,
        "attempts": row.attempt,
        "lanes": list(row.lanes),
        "died_at": iso(row.died_at_ms),
        "value_bytes": row.value_size,
        "value_preview": preview(row.value_head, row.value_size),
        "dlq_partition": row.dlq_partition,
        "dlq_offset": row.dlq_offset,
    }


def letters_table(rows: Iterable[LetterRow], title: str) -> Table:
    table = Table(title=title, show_lines=False)
    for name in ("delivery id", "key", "reason", "att.", "lanes", "died at (UTC)", "payload"):
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(
            row.id,
            _key(row.key),
            row.reason,
            str(row.attempt),
            ",".join(str(lane) for lane in row.lanes),
            iso(row.died_at_ms)[:19].replace("T", " "),
            preview(row.value_head, row.value_size, width=40),
        )
    return table


def stats_json(stats: DlqStats) -> Iterator[dict[str, object]]:
    yield {"kind": "total", "count": stats.total}
    for reason, n in stats.by_reason:
        yield {"kind": "reason", "value": reason, "count": n}
    for hour_ms, n in stats.by_hour:
        yield {"kind": "hour", "value": iso(hour_ms), "count": n}
    for key, n in stats.top_keys:
        yield {"kind": "key", "value": key_spec(key) if key is not None else None, "count": n}


def stats_tables(stats: DlqStats, route: str) -> list[Table]:
    reasons = Table(title=f"dead letters of route {route}: {stats.total} by reason")
    reasons.add_column("reason", overflow="fold")
    reasons.add_column("count", justify="right")
    for reason, n in stats.by_reason[:SHOWN_REASONS]:
        reasons.add_row(reason or "<none>", str(n))
    rest = stats.by_reason[SHOWN_REASONS:]
    if rest:
        reasons.add_row(f"({len(rest)} more reasons)", str(sum(n for _, n in rest)))
    hours = Table(title="by hour of death (UTC)")
    hours.add_column("hour")
    hours.add_column("count", justify="right")
    for hour_ms, n in stats.by_hour:
        hours.add_row(iso(hour_ms)[:16].replace("T", " "), str(n))
    keys = Table(title=f"top {len(stats.top_keys)} keys")
    keys.add_column("key", overflow="fold")
    keys.add_column("count", justify="right")
    for key, n in stats.top_keys:
        keys.add_row(_key(key), str(n))
    return [reasons, hours, keys]
