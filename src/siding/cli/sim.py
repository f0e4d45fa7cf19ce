"""``siding sim``: a simulated consumer service and a load producer, for tests and demos."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from siding.errors import SidingError

if TYPE_CHECKING:
    from siding.devkit.sim_consumer import SimSettings


def _duration(text: str) -> float:
    from siding.devkit.sim_consumer import parse_duration

    try:
        return parse_duration(text)
    except SidingError as exc:
        raise click.BadParameter(str(exc)) from exc


def _latency(text: str) -> tuple[float, float]:
    from siding.devkit.sim_consumer import parse_latency

    try:
        return parse_latency(text)
    except SidingError as exc:
        raise click.BadParameter(str(exc)) from exc


_RATIO = click.FloatRange(0.0, 1.0)


@click.group()
def sim() -> None:
    """Simulated consumers and producers."""


@sim.command("consumer")
@click.option("--listen", default="127.0.0.1:50051", show_default=True, help="host:port")
@click.option("--transport", type=click.Choice(["grpc", "http"]), default="grpc", show_default=True)
@click.option("--latency", default="0", show_default=True, help="200ms, 1s or a range: 0-5ms")
@click.option("--dead-ratio", type=_RATIO, default=0.0, show_default=True)
@click.option("--retry-ratio", type=_RATIO, default=0.0, show_default=True)
@click.option("--hang-ratio", type=_RATIO, default=0.0, show_default=True, help="never answer")
@click.option("--slow-ratio", type=_RATIO, default=0.0, show_default=True)
@click.option("--slow-latency", default="2s", show_default=True)
@click.option(
    "--retry-until-attempt",
    type=click.IntRange(min=1),
    default=None,
    help="RETRY messages answer ACK from this attempt on.",
)
@click.option("--redraw-per-attempt", is_flag=True, help="A new fate on every attempt.")
@click.option(
    "--retry-every",
    type=click.IntRange(min=0),
    default=0,
    help="RETRY the first attempt of every N-th message of a key (by sim-seq and --keys).",
)
@click.option("--keys", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--retry-after", default=None, help="Ask for retries after this long (e.g. 2s).")
@click.option(
    "--webhook-secret",
    envvar="SIDING_SIM_WEBHOOK_SECRET",
    default=None,
    help="HTTP: verify Standard Webhooks signatures (env: SIDING_SIM_WEBHOOK_SECRET).",
)
@click.option(
    "--http-retry-status",
    type=click.Choice(["500", "503", "429"]),
    default="500",
    show_default=True,
    help="HTTP status for RETRY (503/429 mean overloaded: no attempt is spent).",
)
@click.option("--record", type=click.Path(dir_okay=False), default=None, help="Append CSV here.")
@click.option(
    "--crash-on",
    multiple=True,
    help="Exit at once (code 70) on a delivery whose value contains this text: a poison pill"
    " that kills the consumer (repeatable). Run it under a supervisor that restarts it.",
)
@click.option(
    "--reads-batches",
    is_flag=True,
    help="HTTP: answer as an SDK's webhook server does: say 'siding-batch: v1' (a route"
    " without a batch key then sends batches) and stream a batch's results as each finishes.",
)
@click.option("--seed", type=int, default=0, show_default=True)
def consumer(*, listen: str, **options: Any) -> None:
    """Serve a simulated consumer until Ctrl-C / SIGTERM.

    Each delivery's fate comes from a hash of its id and --seed, so retries meet the same fate.
    With --record, one CSV line per delivery received:
    delivery_id,attempt,receive_time_unix_s,produce_ts_unix_s,seq.
    """
    from siding.devkit.sim_consumer import run

    run(settings_from_options(**options), listen)


def settings_from_options(
    *,
    transport: str,
    latency: str,
    dead_ratio: float,
    retry_ratio: float,
    hang_ratio: float,
    slow_ratio: float,
    slow_latency: str,
    retry_until_attempt: int | None,
    redraw_per_attempt: bool,
    retry_after: str | None,
    retry_every: int = 0,
    keys: int = 1,
    webhook_secret: str | None,
    http_retry_status: str,
    record: str | None,
    seed: int,
    crash_on: tuple[str, ...] = (),
    reads_batches: bool = False,
) -> SimSettings:
    """The simulated consumer's settings from ``siding sim consumer``'s options."""
    from siding.devkit.sim_consumer import Behaviour, SimSettings

    try:
        behaviour = Behaviour(
            latency_s=_latency(latency),
            dead_ratio=dead_ratio,
            retry_ratio=retry_ratio,
            hang_ratio=hang_ratio,
            slow_ratio=slow_ratio,
            slow_latency_s=_duration(slow_latency),
            retry_until_attempt=retry_until_attempt,
            redraw_per_attempt=redraw_per_attempt,
            retry_after_s=_duration(retry_after) if retry_after is not None else None,
            seed=seed,
            retry_every=retry_every,
            keys=keys,
        )
    except SidingError as exc:
        raise click.UsageError(str(exc)) from exc
    return SimSettings(
        transport="http" if transport == "http" else "grpc",
        behaviour=behaviour,
        webhook_secret=webhook_secret,
        record=record,
        http_retry_status=int(http_retry_status),
        crash_on=tuple(crash_on),
        reads_batches=reads_batches,
    )


@sim.command("produce")
@click.option("--bootstrap", required=True, help="Kafka bootstrap servers.")
@click.option("--topic", required=True)
@click.option("--count", type=click.IntRange(min=0), required=True)
@click.option("--keys", type=click.IntRange(min=1), default=None, help="Keys k0..k{K-1}.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, help="msgs/s")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True)
def produce(
    *, bootstrap: str, topic: str, count: int, keys: int | None, rate: float | None, partitions: int
) -> None:
    """Produce COUNT messages with sim-seq / sim-produced-at headers (creates the topic)."""
    from siding.devkit.sim_produce import produce as produce_messages

    sent = produce_messages(bootstrap, topic, count, keys=keys, rate=rate, partitions=partitions)
    click.echo(f"produced {sent} messages to {topic}")
