"""A route pinned to partitions (pure parts): the ``partitions`` key, Spark's ``assign``
option, the starting offsets it leads to, overlapping pins refused, and the views (offsets,
backfill, console) that see only the pinned partitions."""

from __future__ import annotations

import json

import pytest

from siding.config import RouteConfig, parse_config, parse_route
from siding.config.pins import assign_option, missing_partitions, shared_partitions
from siding.control.kafka_view import RouteTopics, route_topics
from siding.dlq.fate import LetterRef
from siding.dlq.replay import Letter, Target, replay_record
from siding.errors import ConfigError
from siding.pipeline.driver.backfill_range import BackfillError, Bound, check_partitions
from siding.pipeline.driver.pin_claims import (
    PinClaim,
    claims_of,
    conflict,
    decode,
    live_claims,
)
from siding.pipeline.driver.source import (
    main_subscription,
    source_options,
    starting_offsets,
    starting_offsets_of,
)
from siding.pipeline.driver.topics import RouteFailed, check_sources
from siding.routing import story

KAFKA = '[kafka]\nbootstrap = "127.0.0.1:9092"\n'


def _config(*routes: str) -> str:
    text = KAFKA
    for route in routes:
        text += f'[[route]]\n{route}\nendpoint = "grpc://127.0.0.1:9"\n'
    return text


def _route(source: str, name: str = "r", group: str = "g") -> RouteConfig:
    text = _config(f'name = "{name}"\ngroup = "{group}"\n{source}')
    return parse_config(text, env={}).route[0]


def _error(*routes: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(*routes), env={})
    return str(caught.value)


# -- the key -----------------------------------------------------------------------------------


def test_a_pinned_route_assigns_its_partitions_sorted() -> None:
    route = _route('topic = "orders"\npartitions = [5, 0, 1]')
    assert route.pins == {"orders": (0, 1, 5)}
    assert route.pinned("orders") == (0, 1, 5)
    assert route.subscription == ("assign", '{"orders": [0, 1, 5]}')
    assert route.source_label == "orders[0,1,5]"
    assert route.redacted()["partitions"] == [0, 1, 5]


def test_an_unpinned_route_subscribes_as_before() -> None:
    route = _route('topic = "orders"')
    assert route.pins == {} and route.pinned("orders") is None
    assert route.subscription == ("subscribe", "orders")
    assert route.source_label == "orders"
    assert route.only_pinned("orders", {0: "a", 7: "b"}) == {0: "a", 7: "b"}


def test_a_route_with_topics_pins_each_topic_by_a_table() -> None:
    route = _route('topics = ["a", "b"]\npartitions = { a = [1], b = [2, 0] }')
    assert route.pins == {"a": (1,), "b": (0, 2)}
    assert json.loads(route.subscription[1]) == {"a": [1], "b": [0, 2]}
    assert route.source_label == "a[1],b[0,2]"
    assert route.only_pinned("b", {0: 10, 1: 11, 2: 12}) == {0: 10, 2: 12}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "partitions = [0, -1]",
            "route[r].partitions[1]: -1 is not a partition number (0 or more)",
        ),
        ("partitions = [2, 2]", "route[r].partitions[1]: partition 2 is listed twice"),
        ("partitions = []", "route[r].partitions: expected a non-empty list of partition numbers"),
        ('partitions = ["0"]', "route[r].partitions[0]: '0' is not a partition number"),
        ("partitions = [true]", "route[r].partitions[0]: True is not a partition number"),
        (
            "partitions = { orders = [0] }",
            "route[r].partitions: a route with one topic takes a list",
        ),
    ],
)
def test_a_bad_partition_list_names_the_key(source: str, expected: str) -> None:
    assert expected in _error(f'name = "r"\ngroup = "g"\ntopic = "orders"\n{source}')


def test_a_pin_with_a_pattern_source_is_refused_naming_the_key() -> None:
    message = _error('name = "r"\ngroup = "g"\ntopic_pattern = "o-.*"\npartitions = [0]')
    assert "route[r].partitions: a route with topic_pattern" in message
    assert "cannot be pinned" in message


@pytest.mark.parametrize(
    ("pins", "expected"),
    [
        ("[0]", "route[r].partitions: a route with topics pins each topic's partitions"),
        ("{ a = [0] }", "route[r].partitions: names no partitions of topic 'b'"),
        ("{ a = [0], b = [1], c = [2] }", "route[r].partitions.c: 'c' is not one of the route's"),
        ("{ a = [0], b = [1, -2] }", "route[r].partitions.b[1]: -2 is not a partition number"),
    ],
)
def test_a_bad_table_of_pins_names_the_key(pins: str, expected: str) -> None:
    source = f'name = "r"\ngroup = "g"\ntopics = ["a", "b"]\npartitions = {pins}'
    assert expected in _error(source)


# -- overlapping pins --------------------------------------------------------------------------


def test_disjoint_pins_of_one_group_and_topic_run_side_by_side() -> None:
    text = _config(
        'name = "left"\ngroup = "g"\ntopic = "t"\npartitions = [0, 1]',
        'name = "right"\ngroup = "g"\ntopic = "t"\npartitions = [2]',
    )
    left, right = parse_config(text, env={}).route
    assert (left.pinned("t"), right.pinned("t")) == ((0, 1), (2,))


def test_overlapping_pins_are_refused_naming_both_routes_and_the_partitions() -> None:
    message = _error(
        'name = "left"\ngroup = "g"\ntopic = "t"\npartitions = [0, 1, 5]',
        'name = "right"\ngroup = "g"\ntopic = "t"\npartitions = [5, 1, 2]',
    )
    assert message == (
        "route[right].partitions: routes 'left' and 'right' both pin partition(s) 1, 5 of topic"
        " 't' in group 'g': the pins of one group must not overlap"
    )


def test_a_pin_beside_an_unpinned_route_of_the_group_is_refused() -> None:
    message = _error(
        'name = "whole"\ngroup = "g"\ntopic = "t"',
        'name = "hot"\ngroup = "g"\ntopic = "t"\npartitions = [3]',
    )
    assert message.startswith("route[hot].partitions: route 'whole' reads every partition of")
    assert "route 'hot' pins partition(s) 3 of it" in message
    # the other way round: the unpinned route comes second, its key is the group
    message = _error(
        'name = "hot"\ngroup = "g"\ntopic = "t"\npartitions = [3]',
        'name = "whole"\ngroup = "g"\ntopics = ["t", "u"]',
    )
    assert message.startswith("route[whole].group: route 'whole' reads every partition")


def test_pins_in_different_groups_or_topics_do_not_clash() -> None:
    text = _config(
        'name = "a"\ngroup = "g1"\ntopic = "t"\npartitions = [0]',
        'name = "b"\ngroup = "g2"\ntopic = "t"\npartitions = [0]',
        'name = "c"\ngroup = "g1"\ntopic = "u"\npartitions = [0]',
    )
    assert len(parse_config(text, env={}).route) == 3


def test_two_unpinned_routes_keep_the_old_message() -> None:
    message = _error('name = "a"\ngroup = "g"\ntopic = "t"', 'name = "b"\ngroup = "g"\ntopic = "t"')
    assert message == "route[b].group: another route has the same topic and group"


def test_two_pinned_routes_with_the_default_name_are_told_to_name_themselves() -> None:
    message = _error(
        'group = "g"\ntopic = "t"\npartitions = [0]', 'group = "g"\ntopic = "t"\npartitions = [1]'
    )
    assert "another route is named 't.g' (routes pinned to partitions of one topic" in message


def test_a_route_made_through_the_api_is_checked_against_the_running_pins() -> None:
    running = _route('topic = "t"\npartitions = [0, 1]', name="left")
    with pytest.raises(ConfigError, match="both pin partition\\(s\\) 1 of topic 't'"):
        parse_route(
            {"name": "right", "group": "g", "topic": "t", "partitions": [1, 2],
             "endpoint": "grpc://127.0.0.1:9"},
            [running],
        )  # fmt: skip
    made = parse_route(
        {"name": "right", "group": "g", "topic": "t", "partitions": [2],
         "endpoint": "grpc://127.0.0.1:9"},
        [running],
    )  # fmt: skip
    assert made.pins == {"t": (2,)}


@pytest.mark.parametrize(
    ("one", "two", "shared"),
    [
        (None, None, None),
        ((0, 1), None, (0, 1)),
        (None, (3,), (3,)),
        ((0, 1, 5), (1, 5, 7), (1, 5)),
        ((0,), (1,), ()),
    ],
)
def test_shared_partitions(
    one: tuple[int, ...] | None, two: tuple[int, ...] | None, shared: tuple[int, ...] | None
) -> None:
    assert shared_partitions(one, two) == shared


# -- Spark's source --------------------------------------------------------------------------------


def test_source_options_of_a_pinned_route_assign_and_never_subscribe() -> None:
    route = _route('topic = "t"\npartitions = [0, 2]')
    kind, value = route.subscription
    options = source_options(
        {"kafka.bootstrap.servers": "b:1"},
        value,
        starting="earliest",
        min_partitions=0,
        max_offsets_per_trigger=10,
        subscribe=kind,
    )
    assert options["assign"] == '{"t": [0, 2]}'
    assert "subscribe" not in options and "subscribePattern" not in options
    assert assign_option({"b": (2, 0), "a": (1,)}) == '{"b": [0, 2], "a": [1]}'


def test_a_pinned_main_lane_assigns_every_partition_of_its_hold_topic() -> None:
    route = _route('topic = "t"\npartitions = [2]')
    kind, value = main_subscription(route, ("siding.r.held",), 3)
    assert kind == "assign"
    assert json.loads(value) == {"t": [2], "siding.r.held": [0, 1, 2]}
    assert main_subscription(route, ()) == ("assign", '{"t": [2]}')


def test_starting_offsets_name_only_the_pinned_partitions() -> None:
    # The group committed partition 1 (another route's) and partition 2 (this one's).
    committed = {1: 40, 2: 7}
    spec = json.loads(starting_offsets("t", (0, 2), committed, "earliest"))
    assert spec == {"t": {"0": -2, "2": 7}}
    # Only another route's partition is committed: this one starts from its setting.
    assert starting_offsets("t", (0, 2), {1: 40}, "latest") == "latest"
    # Unpinned, every partition of the count.
    assert json.loads(starting_offsets("t", 3, committed, "earliest")) == {
        "t": {"0": -2, "1": 40, "2": 7}
    }


def test_starting_offsets_of_a_pinned_source_and_its_hold_topic() -> None:
    spec = starting_offsets_of(
        {"t": ({1: 40, 2: 7}, "earliest"), "siding.r.held": ({}, "earliest")},
        {"t": (0, 2), "siding.r.held": 3},
    )
    assert json.loads(spec) == {
        "t": {"0": -2, "2": 7},
        "siding.r.held": {"0": -2, "1": -2, "2": -2},
    }


# -- at start --------------------------------------------------------------------------------------


def test_a_pinned_partition_the_topic_lacks_stops_the_route_in_one_line() -> None:
    route = _route('topic = "t"\npartitions = [0, 5]')
    with pytest.raises(RouteFailed) as caught:
        check_sources(route, {"t": 3})
    assert str(caught.value) == (
        "route r: pinned partition 5 of topic t does not exist (the topic has 3 partitions:"
        " 0-2); fix the route's partitions"
    )
    assert check_sources(route, {"t": 6}) == ("t",)
    assert missing_partitions({"t": (0, 5), "u": (1,)}, {"t": 3, "u": 1}) == [
        ("t", 5, 3),
        ("u", 1, 1),
    ]


# -- the views -------------------------------------------------------------------------------------


def test_the_console_watches_only_the_pinned_partitions() -> None:
    watched = route_topics(_route('topic = "t"\npartitions = [0, 2]'))
    assert watched.pins == (("t", (0, 2)),)
    assert [p for p in range(3) if watched.reads("t", p)] == [0, 2]
    whole = route_topics(_route('topic = "t"'))
    assert all(whole.reads("t", p) for p in range(3))
    assert RouteTopics("r", "g", ("t",), (), "d").reads("t", 9)


def test_backfill_offsets_of_a_partition_the_route_is_not_pinned_to_are_refused() -> None:
    route = _route('topic = "t"\npartitions = [0, 2]')
    extent = {"t": route.only_pinned("t", {0: (0, 9), 1: (0, 9), 2: (0, 9)})}
    bound = Bound("offsets", offsets={"t": {1: 3}}, text="t:1:3")
    with pytest.raises(
        BackfillError, match=r"t has no partition 1 the route reads \(it reads 0, 2\)"
    ):
        check_partitions(bound, extent)
    check_partitions(Bound("offsets", offsets={"t": {2: 3}}, text="t:2:3"), extent)


# -- dead letters back to the origin ---------------------------------------------------------------

NOW = 1_767_225_600_000


def _letter(topic: str, partition: int) -> Letter:
    told = story.StoryHeaders(
        origin=story.Origin(topic, partition, 4, NOW - 10),
        attempt=1,
        lane=0,
        not_before_ms=0,
        hops=(),
        reason="dead",
        died_at_ms=NOW,
        route="r",
    )
    ref = LetterRef("siding.r.dlq", 0, 9, f"{topic}/{partition}/4", NOW)
    return Letter(ref, b"k", b"v", tuple(story.encode(told)), NOW)


def test_a_pinned_route_replays_a_letter_to_a_partition_it_reads() -> None:
    route = _route('topic = "t"\npartitions = [2, 5]')
    # its origin partition, which the route reads
    assert replay_record(_letter("t", 5), Target.ORIGIN, route, NOW).partition == 5
    # a partition it no longer reads (its pin changed): its first pinned one, never another's
    assert replay_record(_letter("t", 1), Target.ORIGIN, route, NOW).partition == 2
    # an unpinned route leaves the partition to the producer (by key), as before
    whole = _route('topic = "t"')
    assert replay_record(_letter("t", 1), Target.ORIGIN, whole, NOW).partition is None


# -- pins across siding processes (siding.pins) ----------------------------------------------

T0 = 1_767_225_600_000
LEASE_MS = 30_000


def _claim(route: str, partitions: tuple[int, ...], at_ms: int = T0, group: str = "g") -> PinClaim:
    return PinClaim(route, group, "t", partitions, "host-b:42:abc", at_ms)


def test_a_claim_is_one_record_per_pinned_topic_keyed_by_group_topic_and_route() -> None:
    route = _route('topics = ["a", "b"]\npartitions = { a = [1], b = [0, 2] }', name="left")
    claims = claims_of(route, "host-a:1:x", T0)
    assert [(c.topic, c.partitions) for c in claims] == [("a", (1,)), ("b", (0, 2))]
    assert claims[0].key == b'["g", "a", "left"]'
    assert decode(claims[1].encode()) == claims[1]
    assert decode(b"not json") is None and decode(b'{"route": "x"}') is None


def test_live_claims_are_the_last_of_each_key_renewed_within_the_lease() -> None:
    fresh, old = _claim("b", (1,), T0 - 1_000), _claim("c", (2,), T0 - LEASE_MS - 1)
    gone = _claim("d", (3,), T0)
    records = [
        (fresh.key, _claim("b", (1,), T0 - 20_000).encode()),  # renewed since
        (fresh.key, fresh.encode()),
        (old.key, old.encode()),  # not renewed: its process is gone
        (gone.key, gone.encode()),
        (gone.key, None),  # stopped cleanly: a tombstone
        (b"junk", b"{"),
    ]
    assert live_claims(records, T0, LEASE_MS) == [fresh]


def test_a_start_overlapping_a_running_routes_claim_is_refused_in_one_line() -> None:
    route = _route('topic = "t"\npartitions = [0, 2]', name="left")
    why = conflict(route, [_claim("right", (2, 3), T0 - 4_000)], T0)
    assert why == (
        "route left: partition(s) 2 of topic t in group g are pinned to route right, running on"
        " host-b:42:abc (its claim in siding.pins renewed 4s ago): the pins of one group must"
        " not overlap"
    )
    # an unpinned route of the group overlaps every claim of its topic
    whole = _route('topic = "t"', name="whole")
    assert conflict(whole, [_claim("right", (3,))], T0) is not None


@pytest.mark.parametrize(
    "claim",
    [
        _claim("right", (1, 3)),  # disjoint
        _claim("left", (0, 2)),  # its own (a restart, or its standby)
        _claim("right", (0, 2), group="other"),  # another group
        PinClaim("right", "g", "u", (0, 2), "h", T0),  # another topic
    ],
)
def test_claims_that_do_not_overlap_let_the_route_start(claim: PinClaim) -> None:
    route = _route('topic = "t"\npartitions = [0, 2]', name="left")
    assert conflict(route, [claim], T0) is None
