"""``siding dlq list|stats|merge|purge``: look at a route's dead letters and act on them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from siding.cli.args import CONFIG, ROUTE, load_route
from siding.dlq.filters import LetterFilter, build_filter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from siding.dlq.read import DlqScope

F = TypeVar("F", bound=Callable[..., Any])

_FORMAT = click.Choice(["table", "json"])


def _common(command: F) -> F:
    """``-c/--config``, ``--route`` and the filters every dlq command takes."""
    options = [
        CONFIG,
        ROUTE,
        click.option("--since", help="Died at or after: ISO time or an age such as 2h."),
        click.option("--until", help="Died before: ISO time or an age such as 30m."),
        click.option("--reason", help="Reason matches this (Java) regular expression."),
        click.option("--key", help="Key equals this text (hex:<digits> for binary keys)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


class _Job:
    """What every dlq command starts from: config, filter, the DLQ's extent, Spark on demand."""

    def __init__(
        self, path: Path, route: str, since: str | None, until: str | None, **more: str | None
    ) -> None:
        from siding.dlq.read import open_scope

        self.config, _ = load_route(path, route)
        self.chosen: LetterFilter = build_filter(
            since=since,
            until=until,
            reason=more.get("reason"),
            key=more.get("key"),
            now_ms=round(time.time() * 1000),
        )
        self.scope: DlqScope = open_scope(self.config, route)
        self.err = Console(stderr=True)

    @property
    def empty(self) -> bool:
        if self.scope.records:
            return False
        self.err.print(f"no dead letters: {self.scope.dlq_topic} is empty")
        return True

    def spark(self) -> SparkSession:
        from siding.pipeline.driver.session import build_session

        with self.err.status("starting Spark…"):
            return build_session(
                self.config.spark.master,
                app_name=f"{self.config.spark.app_name}-dlq",
                extra=self.config.spark.conf_values(),
                jars_dir=self.config.spark.jars_dir,
            )

    def none_match(self) -> None:
        self.err.print(f"no dead letters match in {self.scope.dlq_topic}")


@click.group()
def dlq() -> None:
    """Dead letters of a route: list, stats, merge (replay) and purge."""


@dlq.command("list")
@_common
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show at most N.")
@click.option("--format", "fmt", type=_FORMAT, default="table", show_default=True)
def list_(path: Path, route: str, limit: int | None, fmt: str, **filters: str | None) -> None:
    """One row per dead letter, in DLQ order."""
    from siding.dlq.list import list_letters
    from siding.dlq.render import letter_json, letters_table

    job = _Job(path, route, **filters)
    if job.empty:
        return
    rows = list_letters(job.spark(), job.scope, job.chosen, limit)
    if not rows:
        job.none_match()
    elif fmt == "json":
        for row in rows:
            click.echo(json.dumps(letter_json(row)))
    else:
        title = f"{len(rows)} dead letter(s) of route {route}" + (
            f" (first {limit})" if limit is not None and len(rows) == limit else ""
        )
        Console().print(letters_table(rows, title))


@dlq.command("stats")
@_common
@click.option("--format", "fmt", type=_FORMAT, default="table", show_default=True)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write counts per (reason, hour, key) to FILE.parquet or FILE.csv.",
)
def stats(path: Path, route: str, fmt: str, out: Path | None, **filters: str | None) -> None:
    """Counts by reason, by hour of death, and the top keys."""
    from siding.dlq.render import stats_json, stats_tables
    from siding.dlq.stats import compute_stats

    job = _Job(path, route, **filters)
    if job.empty:
        return
    result = compute_stats(job.spark(), job.scope, job.chosen, out=out)
    if not result.total:
        job.none_match()
        return
    if fmt == "json":
        for line in stats_json(result):
            click.echo(json.dumps(line))
    else:
        console = Console()
        for table in stats_tables(result, route):
            console.print(table)
    if out is not None:
        job.err.print(f"wrote {out}")


def _progress(console: Console) -> Progress:
    return Progress(
        *Progress.get_default_columns()[:1],
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    )


@dlq.command("merge")
@_common
@click.option(
    "--to",
    "to",
    type=click.Choice(["lane1", "origin"]),
    default=None,
    help="lane1 (default; delivery ids stay the same) or origin (the source topic; new ids).",
)
@click.option("--dry-run", is_flag=True, help="Show what would move; change nothing.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, help="msgs/s")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="With --dry-run: show at most N of them.",
)
def merge(
    *,
    path: Path,
    route: str,
    to: str | None,
    dry_run: bool,
    rate: float | None,
    limit: int,
    **filters: str | None,
) -> None:
    """Replay matching dead letters; each letter is replayed once, however often this runs."""
    from siding.dlq.merge import merge_letters
    from siding.dlq.replay import destination, resolve_target

    job = _Job(path, route, **filters)
    target = resolve_target(to, job.scope.route)
    into = destination(target, job.scope.route)
    if job.empty:
        return
    spark = job.spark()
    if dry_run:
        _dry_run(spark, job, limit, f"would merge {{n}} dead letter(s) into {into}")
        return
    with _progress(job.err) as bar:
        task = bar.add_task(f"merging into {into}", total=None)
        moved = merge_letters(
            spark,
            job.scope,
            job.chosen,
            target,
            rate=rate,
            on_start=lambda n: bar.update(task, total=n),
            on_progress=lambda n: bar.advance(task, n),
        )
    if moved:
        click.echo(f"merged {moved} dead letter(s) of route {route} into {into}")
    else:
        job.none_match()


def _dry_run(spark: SparkSession, job: _Job, limit: int, message: str) -> None:
    from siding.dlq.list import list_letters
    from siding.dlq.purge import count_letters
    from siding.dlq.render import letters_table

    total = count_letters(spark, job.scope, job.chosen)
    if not total:
        job.none_match()
        return
    rows = list_letters(spark, job.scope, job.chosen, limit)
    Console().print(letters_table(rows, f"first {len(rows)} of {total}"))
    click.echo(message.format(n=total))


@dlq.command("purge")
@_common
@click.option("--yes", is_flag=True, help="Really discard them.")
def purge(path: Path, route: str, yes: bool, **filters: str | None) -> None:
    """Discard matching dead letters (they stop showing up; Kafka keeps the records)."""
    from siding.dlq.purge import purge_letters

    job = _Job(path, route, **filters)
    if job.empty:
        return
    spark = job.spark()
    with _progress(job.err) as bar:
        task = bar.add_task("purging", total=None)
        gone = purge_letters(
            spark,
            job.scope,
            job.chosen,
            confirmed=yes,
            on_start=lambda n: bar.update(task, total=n),
            on_progress=lambda n: bar.advance(task, n),
        )
    if gone:
        click.echo(f"purged {gone} dead letter(s) of route {route}")
    else:
        job.none_match()
