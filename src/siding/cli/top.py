"""``siding top``: the live terminal view of any running siding, read from its control API."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from siding.cli.args import CONTROL_CONFIG, CONTROL_URL, control_url
from siding.config import load_config


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def _open(by_lane: dict[str, int] | None, lane: dict[str, Any]) -> str:
    """Calls open now in ``lane`` ("-" before the first report, and for the park lane, whose
    calls count under the lane of the record they deliver)."""
    if by_lane is None or lane.get("lane", 0) < 0:
        return "-"
    return f"{by_lane.get(lane.get('label', ''), 0):,}"


def top_view(status: dict[str, Any]) -> RenderableType:
    """Pure: one frame of ``siding top`` from a ``/status`` document."""
    healthy = status.get("healthy")
    head = Text.assemble(
        ("siding ", "bold"),
        ("healthy" if healthy else "unhealthy", "green" if healthy else "bold red"),
        f"  up {status.get('uptime_s', 0):,.0f} s",
    )
    parts: list[RenderableType] = [head]
    if status.get("last_error"):
        parts.append(Text(f"last error: {status['last_error']}", style="red"))
    table = Table(box=None, pad_edge=False)
    for column in (
        "route", "lane", "rate/s", "records", "ack", "→ lane", "→ DLQ", "parked", "outputs",
        "in flight now", "peak", "p50 ms", "p99 ms", "breaker", "suspects", "last batch s",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column in ("route", "lane") else "right")
    for route in status.get("routes", []):
        control = route.get("control") or {}
        name = route["name"] + (" (paused)" if control.get("paused") else "")
        open_now = (((route.get("kafka") or {}).get("in_flight")) or {}).get("by_lane")
        for n, lane in enumerate(route.get("lanes", [])):
            latency = lane.get("latency_s") or {}
            breaker = lane.get("breaker", "closed")
            suspects = lane.get("suspects") or {}
            table.add_row(
                name if n == 0 else "",
                lane.get("label", str(lane.get("lane"))),
                f"{lane.get('rate_per_s', 0):,.1f}",
                f"{lane.get('records', 0):,}",
                f"{lane.get('acked', 0):,}",
                f"{lane.get('to_lane', 0):,}",
                f"{lane.get('to_dlq', 0):,}",
                f"{lane.get('parked', 0):,}",
                f"{lane.get('outputs', 0):,}",
                _open(open_now, lane),
                f"{lane.get('in_flight_last_batch', 0):,}",
                _ms(latency.get("p50", 0.0)),
                _ms(latency.get("p99", 0.0)),
                Text(breaker, style="green" if breaker == "closed" else "bold red"),
                f"{suspects.get('suspected', 0):,}/{suspects.get('convicted', 0):,}",
                f"{lane.get('last_batch_s', 0):.2f}",
            )
    parts.append(table)
    stopped = [q["name"] for q in status.get("queries", []) if not q.get("active")]
    if stopped:
        parts.append(Text(f"stopped: {', '.join(stopped)}", style="bold red"))
    return Group(*parts)


def read_status(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{url}/status", timeout=5) as response:
            document: dict[str, Any] = json.loads(response.read())
            return document
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read {url}/status: {exc}") from None


@click.command()
@CONTROL_CONFIG
@CONTROL_URL
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds per refresh.")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
def top(path: str | None, url: str | None, interval: float, once: bool) -> None:
    """The live view of a running siding (its control API's /status)."""
    if url is None:
        if path is None:
            raise click.UsageError("give -c FILE or --url")
        url = control_url(load_config(path))
    url = url.rstrip("/")
    console = Console()
    if once:
        console.print(top_view(read_status(url)))
        return
    with Live(top_view(read_status(url)), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(top_view(read_status(url)), refresh=True)
        except KeyboardInterrupt:
            pass
