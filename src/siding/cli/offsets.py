"""``siding offsets show | reset``: where a route's source stands, and moving it (the main
lane's checkpoint and the consumer group together; docs/operations.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from siding.cli import logs
from siding.cli.args import CONFIG, ROUTE, load_route

if TYPE_CHECKING:
    from siding.pipeline.offline.moves import RouteOffsets
    from siding.pipeline.offline.positions import Plan, Row, Target

F = TypeVar("F", bound=Callable[..., Any])


def _common(command: F) -> F:
    options = [
        CONFIG,
        ROUTE,
        click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table."),
        click.option(
            "--topic",
            "topic",
            default=None,
            help="Which source topic, for a route that reads several (topics, topic_pattern).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.group()
def offsets() -> None:
    """A route's source position: show it, or move it (checkpoint and group together)."""


@offsets.command("show")
@_common
def show(path: Path, route: str, as_json: bool, topic: str | None) -> None:
    """Per partition: the checkpoint's position, the group's offset, the log and the lag. A
    route that reads several topics shows each (or the one given by --topic)."""
    from siding.pipeline.offline import moves, positions

    config, chosen = load_route(path, route)
    several = topic is None and chosen.single_topic is None
    topics = moves.source_topics(config, chosen) if several else (topic,)
    shown = []
    for one in topics:
        view = moves.look(config, chosen, topic=one)
        shown.append((view, positions.plan(view.extents, view.checkpoint, view.group)))
    if as_json:
        objects = [_json(view, planned) for view, planned in shown]
        if several:
            click.echo(json.dumps({"route": route, "group": chosen.group, "topics": objects}))
        else:
            click.echo(json.dumps(objects[0]))
        return
    console = Console()
    if not shown:
        console.print(f"route {route}: no topic matches {chosen.source_label} yet")
    for view, planned in shown:
        console.print(_table(view, planned, moving=False))
        for note in _notes(view, planned):
            console.print(note, highlight=False)


_TARGETS = "--to-earliest, --to-latest, --to-datetime, --by-duration or --to-offset"


@offsets.command("reset")
@_common
@click.option("--to-earliest", is_flag=True, help="The first record still in each partition.")
@click.option("--to-latest", is_flag=True, help="The log end: only records produced from now.")
@click.option("--to-datetime", "to_datetime", help="The first record at or after an ISO time.")
@click.option("--by-duration", "by_duration", help="The first record at or after now - 2h, 30m...")
@click.option("--to-offset", "to_offset", help="Explicit offsets: P:O[,P:O...] (others stay).")
@click.option("--dry-run", is_flag=True, help="Only show old -> new (the default).")
@click.option("--execute", is_flag=True, help="Move the checkpoint and the group.")
def reset(
    *,
    path: Path,
    route: str,
    as_json: bool,
    topic: str | None,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    by_duration: str | None,
    to_offset: str | None,
    dry_run: bool,
    execute: bool,
) -> None:
    """Move a stopped route's source position: a dry run unless --execute."""
    from siding.pipeline.offline import moves, positions

    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    given = [to_earliest, to_latest, to_datetime, by_duration, to_offset]
    if sum(1 for g in given if g not in (None, False)) != 1:
        raise click.UsageError(f"give exactly one of {_TARGETS}")
    target: Target
    if to_earliest or to_latest:
        target = positions.Target("earliest" if to_earliest else "latest")
    elif to_datetime is not None:
        target = positions.Target("datetime", at_ms=positions.parse_datetime(to_datetime))
    elif by_duration is not None:
        now_ms = round(time.time() * 1000)
        target = positions.Target("datetime", at_ms=positions.parse_age(by_duration, now_ms))
    else:
        target = positions.Target("offsets", offsets=positions.parse_offsets(to_offset or ""))
    logs.to_stderr("siding.offsets")
    config, _ = load_route(path, route)
    outcome = moves.reset(config, route, target, execute=execute, topic=topic)
    if as_json:
        data = {
            **_json(outcome.view, outcome.plan),
            "target": target.describe(),
            "executed": outcome.executed,
            "new_batch": outcome.batch,
        }
        click.echo(json.dumps(data))
        return
    console = Console()
    console.print(_table(outcome.view, outcome.plan, moving=True))
    if not outcome.plan.moves:
        console.print(f"nothing to move: route {route} is already there ({target.describe()})")
    elif outcome.executed:
        group = outcome.view.route.group
        moved = f"moved route {route} ({target.describe()}): its checkpoint and group {group}"
        console.print(moved, highlight=False)
    else:
        if outcome.view.running:
            console.print(f"note: the route is running ({outcome.view.running})", highlight=False)
        console.print("dry run: nothing changed; add --execute to move the checkpoint and group")


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def _group_cell(row: Row) -> str:
    if row.group is None:
        return "-"
    return f"{row.group}" if row.group_by_siding else f"{row.group} (other)"


def _change(row: Row) -> str:
    if row.new is None or row.position is None:
        return "" if row.new is None else "set"
    delta = row.new - row.position
    return "=" if delta == 0 else f"{delta:+d}"


def _table(view: RouteOffsets, plan: Plan, *, moving: bool) -> Table:
    route = view.route
    where = str(view.query_dir)
    if view.position is not None and view.position.batch >= 0:
        where += f" (batch {view.position.batch})"
    title = f"route {route.name}: topic {view.source}, group {route.group}\ncheckpoint {where}"
    table = Table(title=title, title_justify="left")
    for header in ("partition", "checkpoint", "group", "log start", "log end"):
        table.add_column(header, justify="right")
    if moving:
        table.add_column("new", justify="right")
        table.add_column("change", justify="right")
    else:
        table.add_column("lag", justify="right")
    for row in plan.rows:
        cells = [str(row.partition), _cell(row.checkpoint), _group_cell(row)]
        cells += [str(row.log_start), str(row.log_end)]
        cells += [_cell(row.new), _change(row)] if moving else [_cell(row.lag)]
        table.add_row(*cells)
    return table


def _notes(view: RouteOffsets, plan: Plan) -> list[str]:
    notes = []
    if view.running:
        notes.append(f"running: {view.running} (positions move while you look)")
    if view.position is None:
        notes.append("no checkpoint position yet: the route starts from its group's offsets")
    elif view.position.pending is not None:
        notes.append(f"batch {view.position.pending} was not committed: it runs again first")
    if view.pending_move:
        notes.append("an interrupted move is pending: the next start or reset finishes it")
    if view.position is not None:
        other = [
            r.partition for r in plan.rows if r.group_by_siding is False and r.group != r.checkpoint
        ]
        if other:
            parts = ", ".join(str(p) for p in other)
            notes.append(
                f"the group was moved by another tool on partition(s) {parts}:"
                " the next start honours it"
            )
    return notes


def _json(view: RouteOffsets, plan: Plan) -> dict[str, object]:
    position = view.position
    return {
        "route": view.route.name,
        "topic": view.source,
        "group": view.route.group,
        "checkpoint": str(view.query_dir),
        "batch": position.batch if position is not None and position.batch >= 0 else None,
        "pending_batch": position.pending if position is not None else None,
        "running": view.running,
        "pending_move": view.pending_move,
        "partitions": [
            {
                "partition": r.partition,
                "checkpoint": r.checkpoint,
                "group": r.group,
                "group_by": None
                if r.group is None
                else ("siding" if r.group_by_siding else "other"),
                "log_start": r.log_start,
                "log_end": r.log_end,
                "lag": r.lag,
                "new": r.new,
            }
            for r in plan.rows
        ],
    }
