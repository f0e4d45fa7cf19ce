"""The story block: a producer's own ``siding.*`` headers are delivered unchanged, never taken for
siding's story, and stories written before the rule still decode."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from siding.model import LaneHop
from siding.pipeline.executor.rows import main_lane_delivery, retry_lane_delivery
from siding.routing import story

NOW = 1_750_000_000_000
USERS_OWN = (("siding.lane", b"7"), ("siding.id", b"mine"), ("app", b"x"), ("siding.reason", b"r"))


def _story(**changes: Any) -> story.StoryHeaders:
    told = story.StoryHeaders(
        origin=story.Origin("trips", 3, 42, NOW - 10),
        attempt=2,
        lane=1,
        not_before_ms=NOW + 1000,
        hops=(LaneHop(0, 1, NOW, "retry"),),
        reason="retry",
        route="billing",
    )
    return dataclasses.replace(told, **changes)


def _row(headers: tuple[tuple[str, bytes], ...]) -> tuple[object, ...]:
    return ("siding.billing.retry-1", 0, 5, b"k", b"v", list(headers), NOW)


def test_a_producers_siding_headers_stay_the_producers_beside_a_story() -> None:
    # Given a lane record whose producer wrote siding.* headers of its own
    headers = (*USERS_OWN, *story.encode(_story()))
    # When siding reads it back
    own, block = story.split(headers)
    told = story.decode(headers)
    # Then the producer's headers come back unchanged and the story is siding's own
    assert own == USERS_OWN
    assert block == story.encode(_story())
    assert told == _story()


def test_a_source_record_delivers_every_header_siding_names_included() -> None:
    delivery = main_lane_delivery(("trips", 3, 42, b"k", b"v", list(USERS_OWN), NOW)).delivery
    assert delivery.headers == USERS_OWN
    assert (delivery.lane, delivery.attempt) == (0, 1)


def test_a_lane_record_delivers_the_producers_headers_with_the_storys_lane() -> None:
    item = retry_lane_delivery(_row((*USERS_OWN, *story.encode(_story()))))
    assert not item.malformed
    assert item.delivery.headers == USERS_OWN
    assert (item.delivery.id, item.delivery.lane, item.delivery.attempt) == ("trips/3/42", 1, 2)
    assert item.not_before_ms == NOW + 1000


def test_a_record_whose_siding_headers_are_followed_by_others_has_no_story() -> None:
    headers = (*story.encode(_story()), ("app", b"x"))
    assert story.decode(headers) is None
    assert story.user_headers(headers) == headers


def test_a_story_written_by_an_older_version_still_decodes() -> None:
    # Before the rule, optional fields were left out and producers' siding.* headers dropped.
    old = (
        ("app", b"x"),
        ("siding.id", b"trips/3/42"),
        ("siding.topic", b"trips"),
        ("siding.partition", b"3"),
        ("siding.offset", b"42"),
        ("siding.timestamp", b"5"),
        ("siding.attempt", b"3"),
        ("siding.lane", b"2"),
        ("siding.not-before", b"9"),
        ("siding.hops", b'[{"lane":0,"attempt":1,"at":1,"reason":"r"}]'),
        ("siding.reason", b"r"),
    )
    told = story.decode(old)
    assert told is not None
    assert (told.origin.delivery_id, told.attempt, told.lane, told.not_before_ms) == (
        "trips/3/42",
        3,
        2,
        9,
    )
    assert (told.died_at_ms, told.route, told.park_token, told.deaths) == (None, "", "", 0)
    assert story.user_headers(old) == (("app", b"x"),)


def test_every_story_carries_every_field_so_the_last_of_a_name_is_sidings() -> None:
    names = [name for name, _ in story.encode(_story())]
    every = [value for key, value in vars(story).items() if key.isupper() and key != "PREFIX"]
    assert sorted(names) == sorted(every)


_names = st.sampled_from(["app", "siding.lane", "siding.id", "siding.not-before", "siding.x"])
_user = st.lists(st.tuples(_names, st.binary(max_size=4)), max_size=6).map(tuple)


@given(own=_user, deaths=st.integers(0, 3), token=st.sampled_from(["", "t1"]))
def test_any_producer_headers_survive_a_story_round_trip(
    own: tuple[tuple[str, bytes], ...], deaths: int, token: str
) -> None:
    told = _story(deaths=deaths, park_token=token, died_at_ms=NOW)
    headers = (*own, *story.encode(told))
    assert story.user_headers(headers) == own
    assert story.decode(headers) == told
