"""``siding backfill``: push a range of a route's source again (docs/backfill.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from siding.cli import logs
from siding.cli.args import CONFIG, ROUTE, load_route

if TYPE_CHECKING:
    from siding.pipeline.driver.backfill import Progress as Done


@click.command("backfill")
@CONFIG
@ROUTE
@click.option(
    "--from",
    "start",
    required=True,
    help="ISO time, age (2h), earliest, or offsets P:O[,P:O] / TOPIC:P:O[,...] (inclusive).",
)
@click.option(
    "--to",
    "end",
    required=True,
    help="ISO time, age, latest, or offsets (exclusive).",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Deliveries in flight at once for the backfill (the live route keeps its own).",
)
@click.option(
    "--chunk",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Records per Spark batch; progress is saved after each.",
)
def backfill(
    *, path: Path, route: str, start: str, end: str, max_in_flight: int, chunk: int
) -> None:
    """Deliver a range of a route's source again, through its dispatcher, lanes and DLQ."""
    from siding.pipeline.driver.backfill import run_backfill
    from siding.pipeline.driver.backfill_range import parse_bound, rate_and_eta

    logs.to_stderr("siding.backfill")
    config, chosen = load_route(path, route)
    now_ms = round(time.time() * 1000)
    single = chosen.single_topic
    first = parse_bound(start, single_topic=single, now_ms=now_ms, option="--from")
    last = parse_bound(end, single_topic=single, now_ms=now_ms, option="--to")
    err = Console(stderr=True)
    started = time.monotonic()
    read = 0
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("backfill", total=None, rate="")

        def on_start(done: Done) -> None:
            what = "resuming backfill" if done.resumed else "backfill"
            bar.update(task, total=done.total, description=f"{what} of route {route}")

        def on_chunk(done: Done, offsets: int) -> None:
            nonlocal read
            read += offsets
            rate, _ = rate_and_eta(read, time.monotonic() - started, done.total - read)
            bar.update(task, advance=offsets, rate=f"{rate:,.0f}/s" if rate else "")

        state = run_backfill(
            config,
            route,
            first,
            last,
            max_in_flight=max_in_flight,
            per_chunk=chunk,
            on_start=on_start,
            on_chunk=on_chunk,
        )
    counts = state.counts
    seconds = time.monotonic() - started
    click.echo(
        f"backfill of route {route} ({state.range_text}): {counts.get('records', 0)} record(s),"
        f" acked {counts.get('acked', 0)}, laned {counts.get('laned', 0)},"
        f" dead {counts.get('dead', 0)} in {seconds:.1f}s"
    )
