"""``siding jars``: the JVM jars siding runs with, fetched ahead of time or taken from a folder."""

from __future__ import annotations

from pathlib import Path

import click

_FROM_HELP = (
    "Take the jars from this folder instead of Maven (a siding jars folder with kafka/ and"
    " spark/, or one folder of jars); each is checked against the jar lock."
)
_CONFIG_HELP = "Use this siding.toml's [spark] jars_dir ($SIDING_JARS_DIR still wins)."
_SOURCE = click.Path(file_okay=False, exists=True, path_type=Path)
_CONFIG = click.Path(dir_okay=False, exists=True, path_type=Path)


def _folder(config: Path | None) -> Path:
    from siding import jvm

    if config is None:
        return jvm.jars_dir()
    from siding.config import load_config

    return jvm.jars_dir(load_config(config).spark.jars_dir)


def _fetch(source: Path | None, config: Path | None) -> None:
    from siding import jvm

    folder = jvm.fetch(_folder(config), source_dir=source)
    click.echo(str(folder))


@click.group(invoke_without_command=True)
@click.option("--from", "source", type=_SOURCE, default=None, help=_FROM_HELP)
@click.option("-c", "--config", type=_CONFIG, default=None, help=_CONFIG_HELP)
@click.pass_context
def jars(ctx: click.Context, source: Path | None, config: Path | None) -> None:
    """The JVM jars (the Kafka broker for `siding dev kafka`, Spark's Kafka connector for
    `siding run`), listed with their sha256 in the lock inside the package. They are fetched
    from Maven Central on first use; `siding jars fetch` does it ahead of time and `siding jars
    --from DIR` takes them from a folder (no network). The folder: $SIDING_JARS_DIR, else
    [spark] jars_dir, else a per-user cache ($XDG_CACHE_HOME/siding/jars/...)."""
    if ctx.invoked_subcommand is not None:
        if source is not None or config is not None:
            raise click.UsageError(
                f"give --from/--config after `{ctx.invoked_subcommand}`, not before"
            )
        return
    if source is None:
        click.echo(ctx.get_help())
        return
    _fetch(source, config)


@jars.command("fetch")
@click.option("--from", "source", type=_SOURCE, default=None, help=_FROM_HELP)
@click.option("-c", "--config", type=_CONFIG, default=None, help=_CONFIG_HELP)
def fetch(source: Path | None, config: Path | None) -> None:
    """Fetch every jar now (from Maven, or --from a folder), verify it, print the folder."""
    _fetch(source, config)


@jars.command("path")
@click.option("-c", "--config", type=_CONFIG, default=None, help=_CONFIG_HELP)
def path(config: Path | None) -> None:
    """Print the jars folder (whether or not the jars are there yet)."""
    click.echo(str(_folder(config)))


@jars.command("archive")
@click.option("--force", is_flag=True, help="Make it again even if it is there.")
def archive(force: bool) -> None:
    """Make the driver JVM's class-data archive for this Java and pyspark (Spark's classes
    parsed once, mapped at every later start: a start takes about 40 % less), and print its
    path; nothing to do when it is there. Every Spark start of `siding run` and the other
    commands uses it once it is there. The folder: $SIDING_JVM_ARCHIVE_DIR, else a per-user
    cache ($XDG_CACHE_HOME/siding/jvm-archive)."""
    from siding import jvmarchive
    from siding.errors import SetupError
    from siding.pipeline.driver.archive import make

    target = jvmarchive.archive_path()
    if target is None:
        raise SetupError(
            "no Java runtime found (JAVA_HOME or java on PATH): install a Java 17+ runtime"
        )
    click.echo(str(target if target.is_file() and not force else make(target)))
