"""``siding dev``: run the embedded parts (Kafka broker) for local development."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import click

from siding.devkit.broker import EmbeddedKafka


@click.group()
def dev() -> None:
    """Local development helpers."""


@dev.command("kafka")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the broker's data here (default: a temporary folder removed on exit).",
)
def kafka(data_dir: Path | None) -> None:
    """Start a single-node KRaft Kafka broker on 127.0.0.1 until Ctrl-C / SIGTERM."""
    stop = threading.Event()

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with EmbeddedKafka(data_dir=data_dir) as broker:
        click.echo(f"bootstrap={broker.bootstrap}", nl=True)
        while not stop.wait(0.5):
            if not broker.running:
                raise click.ClickException(f"the broker exited; see {broker.log_file}")
