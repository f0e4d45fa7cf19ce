"""Derived names are legal Kafka topic names, deterministic, and never shared."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding import naming
from siding.config import MAX_LANES, ROUTE_NAME_MAX, is_legal_topic_name, parse_config

route_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=ROUTE_NAME_MAX,
).filter(lambda name: name not in (".", ".."))
lanes = st.integers(min_value=1, max_value=MAX_LANES)
kinds = st.sampled_from(["keys", "dlq-fate", "audit", "x" * 32])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (naming.lane_topic("billing", 1), "siding.billing.retry-1"),
        (naming.lane_topic("trips.billing", 10), "siding.trips.billing.retry-10"),
        (naming.dlq_topic("billing"), "siding.billing.dlq"),
        (naming.state_topic("billing", "keys"), "siding.billing.state-keys"),
        (naming.state_topic("billing", "dlq-fate"), "siding.billing.state-dlq-fate"),
        (naming.checkpoint_subdir("billing", 0), "billing/main"),
        (naming.checkpoint_subdir("billing", 2), "billing/retry-2"),
        (naming.query_name("billing", 0), "siding.billing.main"),
        (naming.query_name("billing", 3), "siding.billing.retry-3"),
        (naming.lane_label(0), "main"),
        (naming.lane_label(4), "retry-4"),
        (naming.lane_label(naming.PARK_LANE), "parked"),
        (naming.park_topic("billing"), "siding.billing.parked"),
        (naming.checkpoint_subdir("billing", naming.PARK_LANE), "billing/parked"),
        (naming.query_name("billing", naming.PARK_LANE), "siding.billing.parked"),
        (naming.state_topic("billing", "settled"), "siding.billing.state-settled"),
    ],
)
def test_the_naming_scheme(name: str, expected: str) -> None:
    assert name == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda: naming.lane_topic("billing", 0),
        lambda: naming.lane_topic("billing", -1),
        lambda: naming.lane_label(-2),
        lambda: naming.checkpoint_subdir("billing", -2),
        lambda: naming.dlq_topic("bad name"),
        lambda: naming.dlq_topic(".."),
        lambda: naming.dlq_topic("x" * (ROUTE_NAME_MAX + 1)),
        lambda: naming.state_topic("billing", "Keys"),
        lambda: naming.state_topic("billing", "a.b"),
        lambda: naming.state_topic("billing", ""),
        lambda: naming.state_topic("billing", "x" * 33),
        lambda: naming.checkpoint_subdir("../etc", 0),
    ],
)
def test_impossible_inputs_are_refused(call: Callable[[], str]) -> None:
    with pytest.raises(ValueError, match=r"must|safe|numbered"):
        call()


@given(route_names, lanes, kinds)
def test_every_derived_name_of_a_safe_route_is_a_legal_topic(route: str, k: int, kind: str) -> None:
    for name in (
        naming.lane_topic(route, k),
        naming.dlq_topic(route),
        naming.state_topic(route, kind),
    ):
        assert is_legal_topic_name(name), name


@given(route_names, route_names, lanes, lanes)
def test_lane_topics_are_distinct_per_route_and_lane(a: str, b: str, j: int, k: int) -> None:
    assert (naming.lane_topic(a, j) == naming.lane_topic(b, k)) == ((a, j) == (b, k))
    assert (naming.checkpoint_subdir(a, j) == naming.checkpoint_subdir(b, k)) == ((a, j) == (b, k))


@given(route_names, route_names, lanes, kinds)
def test_no_two_kinds_of_topic_share_a_name(a: str, b: str, k: int, kind: str) -> None:
    lane, dlq, state = naming.lane_topic(a, k), naming.dlq_topic(b), naming.state_topic(b, kind)
    assert len({lane, dlq, state}) == 3
    assert naming.state_topic(a, kind) != naming.lane_topic(b, k)


@given(route_names)
def test_names_are_deterministic(route: str) -> None:
    assert naming.lane_topic(route, 1) == naming.lane_topic(route, 1)
    assert naming.dlq_topic(route) == naming.dlq_topic(route)


def test_the_longest_route_name_still_fits() -> None:
    route = "r" * ROUTE_NAME_MAX
    assert is_legal_topic_name(naming.state_topic(route, "k" * 32))
    assert is_legal_topic_name(naming.lane_topic(route, MAX_LANES))


ROUTE = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
topic = "trips"
group = "billing"
endpoint = "grpc://127.0.0.1:50051"
lanes = [{ delay = "1s" }, { delay = "2s" }, { delay = "3s" }]
"""


def test_a_route_gets_one_topic_per_lane_and_the_default_dlq() -> None:
    route = parse_config(ROUTE, env={}).route[0]
    assert naming.route_lane_topics(route) == (
        "siding.trips.billing.retry-1",
        "siding.trips.billing.retry-2",
        "siding.trips.billing.retry-3",
    )
    assert naming.route_dlq(route) == "siding.trips.billing.dlq"


def test_a_configured_dlq_wins() -> None:
    route = parse_config(ROUTE + 'dlq = "trips.billing.dead"\n', env={}).route[0]
    assert naming.route_dlq(route) == "trips.billing.dead"


def test_a_routes_topics_are_one_list_with_their_partitions_and_settings() -> None:
    owned = naming.owned_topics("billing", 2)
    assert owned.names == (
        "siding.billing.retry-1",
        "siding.billing.retry-2",
        "siding.billing.dlq",
        "siding.billing.held",
        "siding.billing.parked",
        "siding.billing.state-keys",
        "siding.billing.state-settled",
        "siding.billing.state-dlq-fate",
        "siding.billing.state-audit",
        "siding.billing.state-live",
        "siding.billing.state-progress",
        "siding.billing.state-fence",
    )
    assert [t.role for t in owned.all[:5]] == [
        naming.Role.LANE,
        naming.Role.LANE,
        naming.Role.DLQ,
        naming.Role.HOLD,
        naming.Role.PARK,
    ]
    assert [t.label for t in (*owned.lanes, owned.park)] == ["retry-1", "retry-2", "parked"]
    carry = {"max.message.bytes": "2097152"}
    # Record topics: the source's partitions and record size; state topics: one, their own.
    assert (owned.dlq.partitions(6), owned.dlq.config(carry)) == (6, carry)
    keys = owned.state(naming.KEYS)
    assert (keys.partitions(6), keys.config(carry)) == (1, dict(naming.COMPACTED))
    assert owned.state(naming.AUDIT).config() == {"cleanup.policy": "delete", "retention.ms": "-1"}
    with pytest.raises(KeyError):
        owned.state("nope")


def test_the_list_uses_the_routes_dlq_and_the_same_names_as_each_function() -> None:
    assert naming.owned_topics("r", 0, "dead").dlq.name == "dead"
    assert naming.owned_topics("r", 0).lanes == ()
    owned = naming.owned_topics("r", 3)
    assert owned.lane_names == tuple(naming.lane_topic("r", k) for k in (1, 2, 3))
    assert (owned.dlq.name, owned.hold.name, owned.park.name) == (
        naming.dlq_topic("r"),
        naming.hold_topic("r"),
        naming.park_topic("r"),
    )
    assert [t.name for t in owned.states] == [
        naming.state_topic("r", kind) for kind in naming.STATE_KINDS
    ]
    assert all(name.startswith(naming.route_prefix("r")) for name in owned.names)
