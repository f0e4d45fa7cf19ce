"""What the commands start from: the config and its route, or the control API's URL."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from siding.cli.args import CONFIG, ROUTE, control_url, load_route
from siding.config import parse_config
from siding.errors import ConfigError
from tests.unit.test_config import BASE


def test_load_route_gives_the_config_and_the_named_route(tmp_path: Path) -> None:
    (tmp_path / "siding.toml").write_text(BASE)

    config, route = load_route(tmp_path / "siding.toml", "billing")

    assert route is config.route[0]
    assert route.name == "billing"


def test_an_unknown_route_names_the_routes_there_are(tmp_path: Path) -> None:
    (tmp_path / "siding.toml").write_text(BASE)

    with pytest.raises(ConfigError, match=r"no route named 'nope' \(routes: billing\)"):
        load_route(tmp_path / "siding.toml", "nope")


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("127.0.0.1:9464", "http://127.0.0.1:9464"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000"),
        ("10.1.2.3:9464", "http://10.1.2.3:9464"),
    ],
)
def test_the_control_url_is_where_the_api_answers_on_this_host(listen: str, url: str) -> None:
    config = parse_config(f'{BASE}\n[control]\nlisten = "{listen}"\n', env={})
    assert control_url(config) == url


def test_a_config_without_the_control_api_says_so() -> None:
    config = parse_config(f'{BASE}\n[control]\nlisten = ""\n', env={})
    with pytest.raises(click.UsageError, match=r"turns the control API off \(\[control\] listen\)"):
        control_url(config)


def test_every_command_taking_the_options_gets_its_own() -> None:
    @click.command()
    @CONFIG
    @ROUTE
    def one(path: Path, route: str) -> None:
        click.echo(f"{path} {route}")

    @click.command()
    @CONFIG
    def two(path: Path) -> None:
        click.echo(str(path))

    assert CliRunner().invoke(one, ["--route", "r"]).output == "siding.toml r\n"
    assert CliRunner().invoke(two, ["-c", "other.toml"]).output == "other.toml\n"
    assert CliRunner().invoke(one, []).exit_code == 2  # --route is required
