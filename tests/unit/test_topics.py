"""Many topics per route (pure parts): ``topic``, ``topics`` or ``topic_pattern``; the Spark
source options, starting offsets and group commits they lead to; the console's, the offsets
tools' and the DLQ tools' view of a route that reads several topics."""

from __future__ import annotations

import json

import pytest

from siding.config import RouteConfig, parse_config
from siding.control.kafka_view import route_topics
from siding.dlq.fate import LetterRef
from siding.dlq.replay import Letter, Target, destination, replay_record
from siding.errors import ConfigError, DlqError, OffsetsError
from siding.pipeline.driver.commits import CommitTarget
from siding.pipeline.driver.source import (
    main_subscription,
    source_options,
    starting_offsets_of,
    topics_in,
)
from siding.pipeline.driver.topics import RouteFailed, check_sources
from siding.pipeline.executor.worker import transport_settings
from siding.pipeline.offline.moves import pick_topic
from siding.routing import story

KAFKA = '[kafka]\nbootstrap = "127.0.0.1:9092"\n'


def _config(*routes: str) -> str:
    text = KAFKA
    for route in routes:
        text += f'[[route]]\n{route}\nendpoint = "grpc://127.0.0.1:9"\n'
    return text


def _route(source: str, extra: str = "") -> RouteConfig:
    return parse_config(_config(f'name = "r"\ngroup = "g"\n{source}\n{extra}'), env={}).route[0]


def _error(*routes: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(*routes), env={})
    return str(caught.value)


# -- configuration ---------------------------------------------------------------------------


def test_a_route_reads_one_topic_a_list_or_a_pattern() -> None:
    one, many = _route('topic = "a"'), _route('topics = ["a", "b"]')
    pattern = _route('topic_pattern = "orders-.*"')
    assert (one.subscription, one.source_topics, one.single_topic) == (
        ("subscribe", "a"),
        ("a",),
        "a",
    )
    assert (many.subscription, many.source_topics, many.single_topic) == (
        ("subscribe", "a,b"),
        ("a", "b"),
        None,
    )
    assert (pattern.subscription, pattern.source_topics, pattern.single_topic) == (
        ("subscribePattern", "orders-.*"),
        (),
        None,
    )
    assert (one.source_label, many.source_label, pattern.source_label) == (
        "a",
        "a,b",
        "pattern:orders-.*",
    )


def test_a_pattern_matches_whole_topic_names_as_kafka_does() -> None:
    route = _route('topic_pattern = "orders-.*"')
    assert route.reads("orders-eu") and not route.reads("old-orders-eu")
    assert route.matching(["b", "orders-2", "x-orders", "orders-1"]) == ("orders-1", "orders-2")
    assert _route('topics = ["a", "b"]').matching(["c"]) == ("a", "b")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            'topic = "a"\ntopics = ["b"]',
            "route[r].topics: give one of topic, topics or topic_pattern, not topic and topics",
        ),
        (
            'topics = ["b"]\ntopic_pattern = "b.*"',
            "route[r].topic_pattern: give one of topic, topics or topic_pattern, not topics and"
            " topic_pattern",
        ),
        ("", "route[r].topic: required key is missing (or give topics or topic_pattern)"),
        ("topics = []", "route[r].topics: expected a non-empty list of topic names"),
        ('topics = ["a", "a"]', "route[r].topics[1]: 'a' is listed twice"),
        ('topics = ["a", "b c"]', "route[r].topics[1]: 'b c' is not a legal Kafka topic name"),
        ('topic_pattern = "(a"', "route[r].topic_pattern: '(a' is not a regular expression"),
        ('topic_pattern = " "', "route[r].topic_pattern: must not be empty"),
        (
            'topic_pattern = ".*"',
            "route[r].topic_pattern: matches 'siding.r.retry-1', a topic siding writes for this"
            " route",
        ),
        ('topics = ["a", "d"]\ndlq = "d"', "route[r].dlq: the DLQ must not be a source topic"),
        ('topic_pattern = "d.*"\ndlq = "dead"', "route[r].dlq: the DLQ must not be a source"),
    ],
)
def test_a_bad_source_is_an_error_naming_its_key(source: str, message: str) -> None:
    assert message in _error(f'name = "r"\ngroup = "g"\n{source}')


def test_a_route_with_a_list_or_pattern_needs_a_name() -> None:
    message = _error('group = "g"\ntopics = ["a"]')
    assert "route[0].name: required key is missing (a route with topics has no default name" in (
        message
    )


def test_a_pattern_that_skips_sidings_own_topics_is_accepted() -> None:
    route = _route(r'topic_pattern = "(?!siding\\.).*"')
    assert not route.reads("siding.r.dlq") and route.reads("anything-else")


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ('topic = "a"', 'topics = ["b", "a"]'),
        ('topics = ["a"]', 'topic_pattern = "a|c"'),
        ('topic_pattern = "o.*"', 'topic_pattern = "o.*"'),
        ('topic_pattern = "o.*"', 'topic = "orders"'),
    ],
)
def test_two_routes_with_the_same_group_must_not_share_a_topic(one: str, two: str) -> None:
    message = _error(f'name = "r1"\ngroup = "g"\n{one}', f'name = "r2"\ngroup = "g"\n{two}')
    assert "route[r2].group: another route has the same topic and group" in message


def test_the_same_topics_with_another_group_are_another_route() -> None:
    text = _config(
        'name = "r1"\ngroup = "g"\ntopics = ["a", "b"]',
        'name = "r2"\ngroup = "h"\ntopic_pattern = "a|b"',
    )
    assert [r.name for r in parse_config(text, env={}).route] == ["r1", "r2"]


def test_check_config_shows_only_the_source_key_given() -> None:
    shown = parse_config(_config('name = "r"\ngroup = "g"\ntopics = ["a", "b"]'), env={})
    route = shown.redacted_dict()["route"][0]
    assert route["topics"] == ["a", "b"] and "topic" not in route and "topic_pattern" not in route
    single = parse_config(_config('name = "s"\ngroup = "g"\ntopic = "a"'), env={})
    route = single.redacted_dict()["route"][0]
    assert route["topic"] == "a" and "topics" not in route and "topic_pattern" not in route


# -- the pipeline's source ------------------------------------------------------------------------


def test_the_main_lane_subscribes_to_the_list_or_the_pattern_and_the_hold_topic() -> None:
    held = ("siding.r.held",)
    assert main_subscription(_route('topics = ["a", "b"]'), ()) == ("subscribe", "a,b")
    assert main_subscription(_route('topics = ["a", "b"]'), held) == (
        "subscribe",
        "a,b,siding.r.held",
    )
    kind, pattern = main_subscription(_route('topic_pattern = "o-.*"'), held)
    assert (kind, pattern) == ("subscribePattern", r"(?:o-.*)|siding\.r\.held")
    import re

    assert re.fullmatch(pattern, "siding.r.held") and re.fullmatch(pattern, "o-1")
    assert not re.fullmatch(pattern, "siding_r_held")


def test_a_pattern_source_uses_spark_subscribe_pattern() -> None:
    options = source_options(
        {"kafka.bootstrap.servers": "k:1"},
        "o-.*",
        starting="earliest",
        min_partitions=0,
        max_offsets_per_trigger=10,
        subscribe="subscribePattern",
    )
    assert options["subscribePattern"] == "o-.*" and "subscribe" not in options


def test_starting_offsets_name_every_partition_of_each_topic_by_its_own_count() -> None:
    got = starting_offsets_of(
        {"a": ({0: 5}, "latest"), "b": ({}, "latest"), "h": ({}, "earliest")},
        {"a": 1, "b": 3, "h": 3},
    )
    assert json.loads(got) == {
        "a": {"0": 5},
        "b": {"0": -1, "1": -1, "2": -1},
        "h": {"0": -2, "1": -2, "2": -2},
    }


def test_starting_offsets_without_any_commit_are_the_fallback() -> None:
    # (a pattern may match a topic created between the listing and Spark's start: no list)
    assert starting_offsets_of({"a": ({}, "latest"), "b": ({}, "latest")}, 2) == "latest"


def test_the_group_commits_the_topics_a_pattern_matched_as_they_appear() -> None:
    end = json.dumps({"o-1": {"0": 3}, "o-2": {"0": 1}, "siding.r.held": {"0": 0}})
    assert topics_in(end) == ("o-1", "o-2", "siding.r.held")
    target = CommitTarget("g", "", ("siding.r.held",), "o-.*")
    assert target.topics_of(end) == ("siding.r.held", "o-1", "o-2")
    listed = CommitTarget("g", "a", ("b",))
    assert listed.topics_of(end) == ("a", "b")
    assert target.topics_of(None) == ("siding.r.held",)


def test_the_sources_at_start_exist_and_a_pattern_never_reads_sidings_own_topics() -> None:
    route = _route('topics = ["a", "b"]')
    assert check_sources(route, {"a": 1, "b": 4}) == ("a", "b")
    with pytest.raises(RouteFailed, match="route r: source topic b does not exist"):
        check_sources(route, {"a": 1})
    pattern = _route('topic_pattern = "o-.*|siding[.]r[.]retry-3"', 'lanes = [{ delay = "1s" }] ')
    assert check_sources(pattern, {"o-2": 1, "o-1": 2, "x": 1}) == ("o-1", "o-2")
    with pytest.raises(RouteFailed, match=r"no topic matches topic_pattern 'o-\.\*' yet"):
        check_sources(_route('topic_pattern = "o-.*"'), {"x": 1})
    with pytest.raises(RouteFailed, match=r"matches siding\.r\.retry-3, a topic siding writes"):
        check_sources(pattern, {"o-1": 1, "siding.r.retry-3": 1})


def test_transports_are_rebuilt_when_the_source_changes() -> None:
    assert transport_settings(_route('topics = ["a"]')) != transport_settings(
        _route('topics = ["a", "b"]')
    )


# -- the tools --------------------------------------------------------------------------------


def test_the_console_polls_the_named_topics_or_those_matching_now() -> None:
    listed = route_topics(_route('topics = ["a", "b"]'))
    assert listed.sources == ("a", "b") and listed.source_topics(["c"]) == ("a", "b")
    pattern = route_topics(_route('topic_pattern = "o-.*"'))
    assert pattern.sources == () and pattern.pattern == "o-.*"
    assert pattern.source_topics(["o-2", "x", "o-1"]) == ("o-1", "o-2")


def test_offsets_tools_work_on_one_topic_of_a_route_that_reads_several() -> None:
    text = _config('name = "r"\ngroup = "g"\ntopics = ["a", "b"]')
    config = parse_config(text, env={})
    route = config.route[0]
    assert pick_topic(config, route, "b") == "b"
    with pytest.raises(OffsetsError, match=r"reads several topics \(a, b\): give --topic"):
        pick_topic(config, route, None)
    with pytest.raises(OffsetsError, match="route r does not read topic 'c'"):
        pick_topic(config, route, "c")
    single = parse_config(_config('name = "s"\ngroup = "g"\ntopic = "a"'), env={})
    assert pick_topic(single, single.route[0], None) == "a"


NOW = 1_767_225_600_000


def _letter(origin_topic: str | None) -> Letter:
    ref = LetterRef("siding.r.dlq", 0, 9, f"{origin_topic}/0/4", NOW)
    headers: tuple[tuple[str, bytes], ...] = (("user", b"u"),)
    if origin_topic is not None:
        told = story.StoryHeaders(
            origin=story.Origin(origin_topic, 0, 4, NOW - 10),
            attempt=1,
            lane=0,
            not_before_ms=0,
            hops=(),
            reason="dead",
            died_at_ms=NOW,
            route="r",
        )
        headers = (*headers, *story.encode(told))
    return Letter(ref, b"k", b"v", headers, NOW)


def test_a_letter_goes_back_to_its_own_origin_topic() -> None:
    route = _route('topic_pattern = "o-.*"')
    for topic in ("o-1", "o-2"):
        record = replay_record(_letter(topic), Target.ORIGIN, route, NOW)
        assert record.topic == topic
    assert destination(Target.ORIGIN, route) == "origin topics (pattern:o-.*)"
    assert destination(Target.ORIGIN, _route('topic = "a"')) == "a"


def test_a_letter_whose_origin_is_unknown_or_no_longer_read_is_refused() -> None:
    route = _route('topics = ["o-1", "o-2"]')
    with pytest.raises(DlqError, match=r"siding\.r\.dlq/0/9 has no siding story"):
        replay_record(_letter(None), Target.ORIGIN, route, NOW)
    with pytest.raises(DlqError, match="no longer reads its origin topic o-3"):
        replay_record(_letter("o-3"), Target.ORIGIN, route, NOW)
    # A single-topic route replays onto its topic, as it always did
    assert replay_record(_letter(None), Target.ORIGIN, _route('topic = "t"'), NOW).topic == "t"
