"""``siding run`` and ``siding check-config``."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from types import FrameType

import click

from siding.cli import logs
from siding.cli.args import CONFIG
from siding.config import load_config

log = logging.getLogger("siding.run")


@click.command("check-config")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-c",
    "--config",
    "option",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The file to check, as `siding run -c` takes it (or give it as the argument).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 when a [kafka] setting will not reach one of the clients (a warning).",
)
def check_config(file: Path | None, option: Path | None, strict: bool) -> None:
    """Validate a siding.toml (default: ./siding.toml) without starting anything; print it
    with secrets redacted, and what each Kafka client gets. Warns about every [kafka] setting
    one of the two clients will not get or does not know."""
    if file is not None and option is not None and file != option:
        raise click.UsageError(f"two files given: {file} and -c {option}; check one at a time")
    path = file or option or Path("siding.toml")
    config = load_config(path)
    shown = {**config.redacted_dict(), "kafka_clients": config.kafka.shown()}
    if config.kafka.clusters:  # what each client gets on each [kafka.clusters.<name>]
        shown["cluster_clients"] = {n: c.shown() for n, c in config.kafka.clusters.items()}
    click.echo(json.dumps(shown, indent=2, default=str))
    notes = config.kafka.notes
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    warned = f", {len(notes)} warning(s)" if notes else ""
    click.echo(f"ok: {len(config.route)} route(s){warned}", err=True)
    if strict and notes:
        raise SystemExit(1)


@click.command("run")
@CONFIG
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
    help="info logs each batch's summary and every breaker transition.",
)
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS, case_sensitive=False),
    default="text",
    show_default=True,
    help="json: one JSON object per line, with the batch and breaker fields.",
)
@click.option(
    "--standby",
    is_flag=True,
    help="Start Spark, then wait for the routes' fences ([fence]); take the routes over when"
    " their driver dies or stops.",
)
def run(path: Path, log_level: str, log_format: str, standby: bool) -> None:
    """Run every route of the config until Ctrl-C / SIGTERM (or `siding ctl drain`): each route
    then drains (docs/operations.md, "Stopping siding"); a second signal stops at once."""
    from siding.control.runner import SidingRun

    logs.configure(log_level.lower(), log_format.lower())
    config = load_config(path)
    for note in config.kafka.notes:
        log.warning("%s", note)
    if standby and not config.fenced:
        raise click.UsageError(
            "--standby needs the fence: [fence] enabled = true, or a remote checkpoint_dir"
        )
    siding = SidingRun(config, standby=standby)

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        siding.request_stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        siding.start()
        siding.run()
        siding.drain()
    finally:
        siding.stop()
    log.info("siding: stopped cleanly")
