"""What commands start from: the config file (``-c``) and the route they name (``--route``),
or the control API of a running siding (``-c`` or ``--url``)."""

from __future__ import annotations

from pathlib import Path

import click

from siding.cli.registered import with_api_route
from siding.config import RouteConfig, SidingConfig, load_config

CONFIG = click.option(
    "-c",
    "--config",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    default="siding.toml",
    show_default=True,
)
ROUTE = click.option("--route", "route", required=True, help="The route's name.")

# The control API's commands: the file is only where to find the API (or --url says it).
CONTROL_CONFIG = click.option(
    "-c", "--config", "path", type=click.Path(dir_okay=False), help="siding.toml"
)
CONTROL_URL = click.option(
    "--url", help="The control API, e.g. http://127.0.0.1:9464 (default: the config's)."
)


def load_route(path: Path, route: str) -> tuple[SidingConfig, RouteConfig]:
    """The config of ``path`` and its route named ``route``, which may be one made through the
    control API (``with_api_route``); a ``ConfigError`` names the routes there are."""
    config = with_api_route(load_config(path), route)
    return config, config.route_named(route)


def control_url(config: SidingConfig) -> str:
    """Where the config's control API answers on this host."""
    address = config.control.address()
    if address is None:
        raise click.UsageError("the config turns the control API off ([control] listen)")
    host, port = address
    return f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}"
