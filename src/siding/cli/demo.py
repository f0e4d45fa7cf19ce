"""``siding demo``: the one-command tour (see ``siding.devkit.demo``)."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click


@click.command("demo")
@click.option(
    "--duration",
    type=click.FloatRange(min=5),
    default=60.0,
    show_default=True,
    help="Seconds of traffic.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Messages per second produced.",
)
@click.option(
    "--live/--plain",
    default=None,
    help="Live view or one line every few seconds (default: live on a terminal).",
)
def demo(duration: float, rate: float, live: bool | None) -> None:
    """Watch siding push a Kafka topic to a slow, flaky consumer service for about a minute.

    Starts an embedded Kafka broker, a simulated consumer service and the pipeline, and stops
    all of them when done (or on Ctrl-C).
    """
    from rich.console import Console

    from siding.devkit.demo import DemoSettings, run_demo

    stop = threading.Event()

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    result = run_demo(
        DemoSettings(duration_s=duration, rate=rate, live=live), stop, Console(soft_wrap=True)
    )
    if result.interrupted:
        raise SystemExit(130)
