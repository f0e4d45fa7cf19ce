"""The one list of a route's topics (siding.naming): what the config's checks test a pattern
against, what a route's start creates, and what a backfill of a route that never ran creates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from siding.config import RouteConfig, parse_config
from siding.errors import ConfigError
from siding.pipeline.driver import backfill
from siding.pipeline.driver.topics import RouteFailed, check_sources, prepare

KAFKA = '[kafka]\nbootstrap = "127.0.0.1:9"\n'
THREE_LANES = 'lanes = [{ delay = "1s" }, { delay = "2s" }, { delay = "3s" }]'


def _config(route: str) -> str:
    return f'{KAFKA}[[route]]\nname = "r"\ngroup = "g"\nendpoint = "grpc://127.0.0.1:9"\n{route}\n'


def _route(route: str) -> RouteConfig:
    return parse_config(_config(route), env={}).route[0]


class _Done:
    def __init__(self, value: object = None) -> None:
        self._value = value

    def result(self) -> object:
        return self._value


class FakeAdmin:
    """The parts of confluent_kafka's AdminClient that topic creation uses."""

    def __init__(self, topics: Mapping[str, int], configs: Mapping[str, Mapping[str, str]]):
        self.topics = dict(topics)
        self.configs = configs
        self.created: dict[str, tuple[int, dict[str, str]]] = {}

    def list_topics(self, **_: object) -> Any:
        listed = {
            n: SimpleNamespace(partitions=dict.fromkeys(range(p))) for n, p in self.topics.items()
        }
        return SimpleNamespace(topics=listed)

    def describe_configs(self, resources: Iterable[Any], **_: object) -> Any:
        return {
            r: _Done({k: SimpleNamespace(value=v) for k, v in self.configs.get(r.name, {}).items()})
            for r in resources
        }

    def create_topics(self, new: Iterable[Any], **_: object) -> dict[str, _Done]:
        for topic in new:
            self.created[topic.topic] = (topic.num_partitions, dict(topic.config))
            self.topics[topic.topic] = topic.num_partitions
        return {topic: _Done() for topic in self.created}


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


LIMIT = {"max.message.bytes": "4194304"}


def test_a_backfill_of_a_route_that_never_ran_creates_its_lanes_as_its_start_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = parse_config(
        _config('topic = "orders"\nlanes = [{ delay = "1s" }, { delay = "2s" }]'), env={}
    )
    route = config.route[0]
    started = FakeAdmin({"orders": 3}, {"orders": LIMIT})
    prepare(started, route)
    backfilled = FakeAdmin({"orders": 3}, {"orders": LIMIT})
    monkeypatch.setattr(backfill, "admin_client", lambda _conf: backfilled)
    backfill._ensure_route_topics(config, route, {("orders", p): (0, 5) for p in range(3)})
    records = ("siding.r.retry-1", "siding.r.retry-2", "siding.r.dlq")
    assert {t: backfilled.created[t] for t in records} == {t: (3, LIMIT) for t in records}
    assert {t: started.created[t] for t in records} == {t: (3, LIMIT) for t in records}


def test_a_route_start_creates_its_topics_with_their_settings() -> None:
    route = _route('topic = "orders"\nlanes = [{ delay = "1s" }]\npark = { enabled = true }')
    admin = FakeAdmin({"orders": 2}, {})
    prepare(admin, route)
    compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
    assert admin.created == {
        "siding.r.retry-1": (2, {}),
        "siding.r.dlq": (2, {}),
        "siding.r.state-keys": (1, compacted),
        "siding.r.state-progress": (
            1,
            {**compacted, "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"},
        ),
        "siding.r.state-live": (
            1,
            {"cleanup.policy": "compact,delete", "retention.ms": "3600000", "segment.ms": "600000"},
        ),
        "siding.r.parked": (2, {}),
        "siding.r.state-settled": (
            1,
            {**compacted, "delete.retention.ms": "3600000", "segment.ms": "3600000"},
        ),
    }
