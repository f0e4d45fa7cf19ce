"""``siding run`` and ``siding check-config``."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from types import FrameType

import click

from siding.config import load_config


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
def check_config(file: Path | None, option: Path | None) -> None:
    """Validate a siding.toml (default: ./siding.toml) without starting anything; print it
    with secrets redacted."""
    if file is not None and option is not None and file != option:
        raise click.UsageError(f"two files given: {file} and -c {option}; check one at a time")
    path = file or option or Path("siding.toml")
    config = load_config(path)
    click.echo(json.dumps(config.redacted_dict(), indent=2, default=str))
    click.echo(f"ok: {len(config.route)} route(s)", err=True)


@click.command("run")
@click.option(
    "-c",
    "--config",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    default="siding.toml",
    show_default=True,
)
def run(path: Path) -> None:
    """Run every route of the config until Ctrl-C / SIGTERM."""
    from siding.control import ControlServer, application_health
    from siding.pipeline.app import Application
    from siding.pipeline.metrics import MetricsSink

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    config = load_config(path)
    metrics = MetricsSink()
    for route in config.route:
        metrics.declare(route.name, 1 + len(route.lanes))
    app = Application(config, sink=metrics.sink)
    address = config.control.address()
    control = ControlServer(address, metrics, lambda: application_health(app)) if address else None

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        app.stop_event.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        if control is not None:
            control.start()
            click.echo(f"siding: control API on {control.url} (/health /status /metrics)", err=True)
        app.start()
        click.echo(f"siding: running {len(config.route)} route(s); Ctrl-C to stop", err=True)
        app.run()
    finally:
        app.stop()
        if control is not None:
            control.stop()
    click.echo("siding: stopped cleanly", err=True)
