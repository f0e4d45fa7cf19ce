"""The registry's records, the state they fold into, join requests, and routes given as data
(docs/registration.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.config import parse_config, parse_route
from siding.errors import ConfigError
from siding.registry import MemberFeed, RegistryState, join_request, members_of
from siding.registry.join import DEFAULT_CAPACITY, refusal
from siding.registry.records import (
    Registration,
    RouteEntry,
    alive_record,
    api_route,
    lapsed,
    paused,
    registration_record,
    registration_tombstone,
    renewed,
    route_record,
    route_tombstone,
)
from siding.routing.producer import OutRecord

TOPIC = "siding.registry"


def reg(consumer_id: str = "c1", route: str = "orders", expires_ms: int = 10_000) -> Registration:
    return Registration(route, consumer_id, "grpc://10.0.0.5:50051", 100, 1_000, expires_ms)


def fold(*records: tuple[bytes, bytes | None]) -> RegistryState:
    state = RegistryState()
    state.apply_all(records)
    return state


def as_pair(record: OutRecord) -> tuple[bytes, bytes | None]:
    return record.key or b"", record.value


names = st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True)


@given(names, st.from_regex(r"[0-9a-f]{16}", fullmatch=True), st.integers(1, 100_000))
def test_a_registration_reads_back_as_it_was_written(route: str, cid: str, capacity: int) -> None:
    written = Registration(route, cid, "http://h:8080/hook", capacity, 5, 99)
    state = fold(as_pair(registration_record(TOPIC, written)))
    assert state.of_route(route) == [written]


def test_a_tombstone_removes_a_registration_and_a_route() -> None:
    entry = RouteEntry("orders", {"topic": "o", "group": "g", "lease": "5s"}, 7)
    state = fold(
        as_pair(route_record(TOPIC, entry)),
        as_pair(registration_record(TOPIC, reg("c1"))),
        as_pair(registration_record(TOPIC, reg("c2"))),
        as_pair(registration_tombstone(TOPIC, "orders", "c1")),
    )
    assert state.routes == {"orders": entry}
    assert [r.id for r in state.of_route("orders")] == ["c2"]
    state.apply_all(
        [
            as_pair(registration_tombstone(TOPIC, "orders", "c2")),
            as_pair(route_tombstone(TOPIC, "orders")),
        ]
    )
    assert state.routes == {} and state.consumers == {}


def test_records_of_a_kind_this_version_does_not_know_are_skipped() -> None:
    state = fold((b"pipeline/x", b"{}"), (b"consumer/orders", b"{}"))
    assert state == RegistryState()


def test_a_lease_lapses_after_it_ends_unless_renewed() -> None:
    held = reg(expires_ms=10_000)
    assert lapsed([held], 10_000) == []
    assert lapsed([held], 10_001) == [held]
    assert lapsed([renewed(held, 10_001, 15.0)], 20_000) == []
    assert renewed(held, 10_001, 15.0).expires_ms == 25_001


JOINS = [
    ({"address": "10.0.0.5:50051"}, "grpc://10.0.0.5:50051", DEFAULT_CAPACITY),
    (
        {"address": "10.0.0.5:50051", "transport": "grpcs", "capacity": 8},
        "grpcs://10.0.0.5:50051",
        8,
    ),
    ({"address": "10.0.0.5:8080/hook", "transport": "http"}, "http://10.0.0.5:8080/hook", 100),
    ({"address": "https://svc.example/hook"}, "https://svc.example/hook", 100),
    ({"address": "grpc://h:1", "transport": "grpc"}, "grpc://h:1", 100),
]


@pytest.mark.parametrize(("body", "url", "capacity"), JOINS)
def test_a_join_request_gives_the_instance_s_endpoint(
    body: dict[str, object], url: str, capacity: int
) -> None:
    request = join_request(body)
    assert (request.endpoint.url, request.capacity) == (url, capacity)


BAD_JOINS = [
    ([], "", "JSON object"),
    ({}, "address", "required"),
    ({"address": "h:1", "port": 2}, "port", "unknown key"),
    ({"address": "h:1", "transport": "ftp"}, "transport", "use one of"),
    ({"address": "h"}, "address", "need a port"),
    ({"address": "h:1", "capacity": 0}, "capacity", "whole number"),
    ({"address": "h:1", "capacity": True}, "capacity", "whole number"),
    ({"address": "http://h/x", "transport": "grpc"}, "transport", "does not match"),
    ({"address": "user:pw@h:1"}, "address", ""),
]


@pytest.mark.parametrize(("body", "key", "fragment"), BAD_JOINS)
def test_a_bad_join_request_names_its_key(body: object, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        join_request(body)
    assert caught.value.key == key
    assert fragment in caught.value.message
    assert "pw" not in str(caught.value)


def test_a_route_with_client_certificates_takes_only_tls_instances() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    route = parse_route({"name": "r", "topic": "t", "group": "g", "auth": {"ca_pem": pem}})
    assert refusal(route, join_request({"address": "h:1", "transport": "grpcs"}).endpoint) is None
    assert "TLS" in (refusal(route, join_request({"address": "h:1"}).endpoint) or "")


def test_an_instance_joins_with_a_url_template_but_not_a_batching_route() -> None:
    plain = parse_route({"name": "r", "topic": "t", "group": "g"})
    batching = parse_route({"name": "b", "topic": "t", "group": "g", "batch": {"max": 8}})
    templated = join_request({"address": "http://h:1/orders/{key}"}).endpoint
    fixed = join_request({"address": "http://h:1/orders"}).endpoint

    assert refusal(plain, templated) is None and refusal(batching, fixed) is None
    assert "placeholders" in (refusal(batching, templated) or "")
    with pytest.raises(ConfigError, match="unknown placeholder") as caught:
        join_request({"address": "http://h:1/orders/{nope}"})
    assert caught.value.key == "address"


ROUTE_ERRORS = [
    ({"name": "x", "topic": "t", "group": "g", "deadlin": "1s"}, "route[x].deadlin",
     "unknown key (did you mean 'deadline'?)"),
    ({"name": "x", "topic": "t", "group": "g", "deadline": "5"}, "route[x].deadline",
     "has no unit"),
    ({"name": "x", "topic": "t", "group": "g", "lanes": [{"delay": "soon"}]},
     "route[x].lanes[0].delay", ""),
    ({"name": "x", "topic": "t"}, "route[x].group", "required key is missing"),
    ({"name": "x", "topic": "t", "group": "g", "auth": {"token_file": "/etc/passwd"}},
     "route[x].auth.token_file", "files are not read"),
    ({"name": "billing", "topic": "t", "group": "g"}, "route[billing].name",
     "another route is named 'billing'"),
    ({"name": "y", "topic": "trips", "group": "billing"}, "route[y].group",
     "another route has the same topic and group"),
]  # fmt: skip


@pytest.mark.parametrize(("table", "key", "fragment"), ROUTE_ERRORS)
def test_a_route_given_as_data_is_checked_as_a_file_s_with_the_same_keys(
    table: dict[str, object], key: str, fragment: str
) -> None:
    existing = parse_config(
        '[kafka]\nbootstrap = "a:1"\n[[route]]\nname = "billing"\ntopic = "trips"\n'
        'group = "billing"\nendpoint = "grpc://a:1"\n'
    ).route
    with pytest.raises(ConfigError) as caught:
        parse_route(table, existing)
    assert caught.value.key == key
    assert fragment in caught.value.message


def test_a_route_given_as_data_takes_no_variables_from_the_driver() -> None:
    route = parse_route({"topic": "t", "group": "g", "registration_token": "${HOME}"})
    assert route.name == "t.g"
    assert route.registration_token is not None
    assert route.registration_token.get_secret_value() == "${HOME}"
    assert route.takes_registrations and route.endpoint == ()


def test_without_routes_a_config_needs_a_control_token_and_an_open_api() -> None:
    base = '[kafka]\nbootstrap = "a:1"\n'
    assert parse_config(base + '[control]\ntoken = "t"\n').route == ()
    with pytest.raises(ConfigError):
        parse_config(base + '[control]\ntoken = ""\n')
    with pytest.raises(ConfigError):
        parse_config(base + '[control]\nlisten = ""\ntoken = "t"\n')


def test_a_route_without_endpoints_needs_the_control_api() -> None:
    route = '[[route]]\nname = "r"\ntopic = "t"\ngroup = "g"\n'
    with pytest.raises(ConfigError) as caught:
        parse_config('[kafka]\nbootstrap = "a:1"\n[control]\nlisten = ""\n' + route)
    assert caught.value.key == "route[r].endpoint"
    config = parse_config('[kafka]\nbootstrap = "a:1"\n' + route)
    assert config.route[0].takes_registrations
    assert config.route[0].message_limit == 4 * 1024 * 1024


def test_a_route_with_endpoints_takes_registrations_only_with_a_token() -> None:
    table = {"name": "r", "topic": "t", "group": "g", "endpoint": "grpc://a:1"}
    assert not parse_route(table).takes_registrations
    assert parse_route({**table, "registration_token": "s3cret"}).takes_registrations
    redacted = parse_route({**table, "registration_token": "s3cret"}).redacted()
    assert "s3cret" not in str(redacted)


def test_the_workers_see_each_route_s_members_change_with_a_version() -> None:
    batches = [
        [as_pair(registration_record(TOPIC, reg("c1")))],
        [as_pair(registration_record(TOPIC, renewed(reg("c1"), 5_000, 15.0)))],
        [as_pair(registration_tombstone(TOPIC, "orders", "c1"))],
    ]
    feed = MemberFeed(lambda: lambda: [], interval_s=3600)
    try:
        assert feed.apply(batches[0]) == {"orders"}
        version, members = feed.members("orders")
        assert [m.id for m in members] == ["c1"] and version == 1
        assert feed.apply(batches[1]) == set()  # a renewal changes no member
        assert feed.apply(batches[2]) == {"orders"}
        assert feed.members("orders") == (2, ())
    finally:
        feed.stop()


def test_an_address_that_no_longer_parses_is_left_out() -> None:
    bad = Registration("r", "c", "ftp://h:1", 1, 0, 1)
    assert members_of([bad, reg()]) == members_of([reg()])


def test_leases_are_moved_on_by_the_time_the_driver_was_away() -> None:
    state = fold(as_pair(alive_record(TOPIC, 1_000)), as_pair(registration_record(TOPIC, reg())))
    assert state.alive_ms == 1_000
    assert paused(reg(expires_ms=10_000), 4_000).expires_ms == 14_000
    assert paused(reg(expires_ms=10_000), -5).expires_ms == 10_000


def test_a_route_made_through_the_api_is_found_in_the_records_for_the_dlq_tools() -> None:
    table = {"name": "orders", "topic": "o", "group": "g", "lease": "5s"}
    records = [as_pair(route_record(TOPIC, RouteEntry("orders", table, 7)))]
    found = api_route(records, "orders")
    assert found is not None and (found.topic, found.lease) == ("o", 5.0)
    assert api_route(records, "other") is None
    assert api_route([*records, as_pair(route_tombstone(TOPIC, "orders"))], "orders") is None
