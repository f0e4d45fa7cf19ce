"""Entry point of the ``siding`` command: assembles the command groups."""

from __future__ import annotations

import sys

import click

from siding import __version__
from siding.errors import SidingError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="siding")
def cli() -> None:
    """siding: push Kafka messages to consumer services without head-of-line blocking."""


def _register() -> None:
    from siding.cli import dev, run

    cli.add_command(dev.dev)
    cli.add_command(run.run)
    cli.add_command(run.check_config)
    from siding.cli import sim

    cli.add_command(sim.sim)
    from siding.cli.dlq import dlq

    cli.add_command(dlq)
    from siding.cli.offsets import offsets

    cli.add_command(offsets)
    from siding.cli.backfill import backfill

    cli.add_command(backfill)
    from siding.cli import ctl, demo, top

    cli.add_command(ctl.ctl)
    cli.add_command(top.top)

    cli.add_command(demo.demo)
    from siding.cli.jars import jars

    cli.add_command(jars)


def main() -> None:
    _register()
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SidingError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
