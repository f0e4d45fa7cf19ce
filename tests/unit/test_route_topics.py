"""The one list of a route's topics (siding.naming): what the config's checks test a pattern
against, what a route's start creates, and what a backfill of a route that never ran creates."""

from __future__ import annotations

import pytest

from siding.config import RouteConfig, parse_config
from siding.errors import ConfigError
from siding.pipeline.driver.topics import RouteFailed, check_sources

KAFKA = '[kafka]\nbootstrap = "127.0.0.1:9"\n'
THREE_LANES = 'lanes = [{ delay = "1s" }, { delay = "2s" }, { delay = "3s" }]'


def _config(route: str) -> str:
    return f'{KAFKA}[[route]]\nname = "r"\ngroup = "g"\nendpoint = "grpc://127.0.0.1:9"\n{route}\n'


def _route(route: str) -> RouteConfig:
    return parse_config(_config(route), env={}).route[0]


def test_a_pattern_route_with_three_lanes_may_not_read_its_own_third_lane() -> None:
    pattern = 'topic_pattern = "o-.*|siding[.]r[.]retry-3"'
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(f"{pattern}\n{THREE_LANES}"), env={})
    assert "route[r].topic_pattern: matches 'siding.r.retry-3', a topic siding writes" in str(
        refused.value
    )
    # The same route, built past the config's checks, is refused at start too (before its
    # lane exists: the list of its topics says it is its own).
    one_lane = _route(f'{pattern}\nlanes = [{{ delay = "1s" }}]')
    three = one_lane.model_copy(update={"lanes": _route(f'topic = "o"\n{THREE_LANES}').lanes})
    with pytest.raises(RouteFailed, match=r"matches siding\.r\.retry-3, a topic siding writes"):
        check_sources(three, {"o-1": 1})
