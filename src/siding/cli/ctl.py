"""``siding ctl``: drive a running siding through its control API (docs/operations.md)."""

from __future__ import annotations

import json
import os
import tomllib
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from siding.cli.args import CONTROL_CONFIG, CONTROL_URL, control_url
from siding.config import interpolate, load_config

TOKEN_ENV = "SIDING_CONTROL_TOKEN"


@click.group()
@CONTROL_CONFIG
@CONTROL_URL
@click.option(
    "--token", envvar=TOKEN_ENV, help=f"Bearer token (env {TOKEN_ENV}; default: the config's)."
)
@click.pass_context
def ctl(ctx: click.Context, path: str | None, url: str | None, token: str | None) -> None:
    """Pause, resume, close a breaker, change limits, drain, or create and delete routes on a
    running siding and list the consumer instances that joined them."""
    if path is not None:
        config = load_config(path)
        if url is None:
            url = control_url(config)
        if token is None and config.control.token is not None:
            token = config.control.token.get_secret_value()
    if url is None:
        raise click.UsageError("give -c FILE or --url")
    ctx.obj = (url.rstrip("/"), token)


def _call(
    ctx: click.Context,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> None:
    url, token = ctx.obj
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(
        f"{url}{path}", data=None if method == "GET" else data, method=method
    )
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            click.echo(response.read().decode().strip())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace").strip()
        raise click.ClickException(f"{method} {path}: HTTP {exc.code}: {text}") from None
    except urllib.error.URLError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc.reason}") from None


@ctl.command()
@click.argument("route")
@click.pass_context
def pause(ctx: click.Context, route: str) -> None:
    """Stop taking new records; the batch running now finishes and commits."""
    _call(ctx, "POST", f"/routes/{route}/pause")


@ctl.command()
@click.argument("route")
@click.pass_context
def resume(ctx: click.Context, route: str) -> None:
    """Take records again."""
    _call(ctx, "POST", f"/routes/{route}/resume")


@ctl.command("breaker-close")
@click.argument("route")
@click.pass_context
def breaker_close(ctx: click.Context, route: str) -> None:
    """Close the route's circuit breakers (from each worker's next task)."""
    _call(ctx, "POST", f"/routes/{route}/breaker/close")


@ctl.command()
@click.pass_context
def drain(ctx: click.Context) -> None:
    """Stop siding gracefully, as SIGTERM does: every route drains (its calls in flight finish
    within drain_timeout, its batch commits), then the process exits 0."""
    _call(ctx, "POST", "/drain")


@ctl.command("set")
@click.argument("route")
@click.option("--max-in-flight", type=int, help="From the adaptive floor up to the configured.")
@click.option("--rate-limit", type=float, help="Sends per second, within the configured limit.")
@click.pass_context
def set_limits(
    ctx: click.Context, route: str, max_in_flight: int | None, rate_limit: float | None
) -> None:
    """Change max_in_flight and/or rate_limit from the next batch (not kept across restarts)."""
    changes: dict[str, Any] = {}
    if max_in_flight is not None:
        changes["max_in_flight"] = max_in_flight
    if rate_limit is not None:
        changes["rate_limit"] = rate_limit
    if not changes:
        raise click.UsageError("give --max-in-flight and/or --rate-limit")
    _call(ctx, "PATCH", f"/routes/{route}", changes)


@ctl.group()
def routes() -> None:
    """Routes of the config file and routes made through the API (docs/registration.md)."""


@routes.command("list")
@click.pass_context
def routes_list(ctx: click.Context) -> None:
    """Every route running, with where it came from (config or api)."""
    _call(ctx, "GET", "/routes")


@routes.command("add")
@click.option(
    "-f",
    "--file",
    "path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML: the keys of one [[route]] table (at the top, or as one [[route]]).",
)
@click.pass_context
def routes_add(ctx: click.Context, path: Path) -> None:
    """Create a route from FILE; ${VAR} in it is filled from this shell's environment."""
    _call(ctx, "POST", "/routes", route_table(path, os.environ))


@routes.command("delete")
@click.argument("route")
@click.option(
    "--timeout",
    type=float,
    default=300.0,
    show_default=True,
    help="Seconds to wait: the route stops once its running batches have committed.",
)
@click.pass_context
def routes_delete(ctx: click.Context, route: str, timeout: float) -> None:
    """Stop a route made through the API and forget it (its topics stay)."""
    _call(ctx, "DELETE", f"/routes/{route}", timeout_s=timeout)


@ctl.command()
@click.argument("route")
@click.pass_context
def consumers(ctx: click.Context, route: str) -> None:
    """The consumer instances that joined ROUTE, with their leases."""
    _call(ctx, "GET", f"/routes/{route}/consumers")


def route_table(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """The route in a TOML file: its keys at the top, or one ``[[route]]`` table."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    tables = data.get("route")
    if isinstance(tables, list):
        if len(tables) != 1 or len(data) != 1:
            raise click.ClickException(f"{path}: give one route (one [[route]] table)")
        data = tables[0]
    try:
        filled = _fill(data, env)
    except ValueError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    assert isinstance(filled, dict)
    return filled


def _fill(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, Mapping):
        return {k: _fill(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, env) for v in value]
    return value
