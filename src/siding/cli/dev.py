"""``siding dev``: run the embedded parts (Kafka broker) for local development."""

from __future__ import annotations

import os
import secrets
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from siding.devkit.broker import EmbeddedKafka, SaslUser, SecuredListener

PASSWORD_ENV = "SIDING_DEV_KAFKA_PASSWORD"


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
@click.option(
    "--secured",
    is_flag=True,
    help="Also open a SASL_SSL listener: user `siding` (SCRAM-SHA-512 and PLAIN), a CA made"
    " for this run. The password is $SIDING_DEV_KAFKA_PASSWORD, or a new one printed.",
)
def kafka(data_dir: Path | None, secured: bool) -> None:
    """Start a single-node KRaft Kafka broker on 127.0.0.1 until Ctrl-C / SIGTERM."""
    stop = threading.Event()

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    password = os.environ.get(PASSWORD_ENV) or secrets.token_urlsafe(18)
    user = SaslUser("siding", password)
    listener = SecuredListener(scram_users=(user,), plain_users=(user,)) if secured else None
    with EmbeddedKafka(data_dir=data_dir, secured=listener) as broker:
        click.echo(f"bootstrap={broker.bootstrap}", nl=True)
        if listener is not None:
            # A throwaway loopback broker's own credential: printed unless the caller chose it.
            shown = f"${PASSWORD_ENV}" if os.environ.get(PASSWORD_ENV) else password
            click.echo(f"secured_bootstrap={broker.secure_bootstrap}")
            click.echo("security.protocol=SASL_SSL  sasl.mechanism=SCRAM-SHA-512 or PLAIN")
            click.echo(f"sasl.username=siding  sasl.password={shown}")
            click.echo(f"ssl.ca.location={broker.ca_file}")
        while not stop.wait(0.5):
            if not broker.running:
                raise click.ClickException(f"the broker exited; see {broker.log_file}")
