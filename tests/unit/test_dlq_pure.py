"""Pure parts of the DLQ tools: time and key filters, previews, replay records, pacing."""

from __future__ import annotations

import json

import pytest

from siding.config import RouteConfig, parse_config
from siding.dlq.fate import Fate, LetterRef, fate_record
from siding.dlq.filters import build_filter, key_spec, parse_key, parse_when
from siding.dlq.preview import preview
from siding.dlq.replay import (
    REPLAY_OF,
    Letter,
    Target,
    chunk_size,
    pause_s,
    replay_record,
    resolve_target,
)
from siding.errors import DlqError
from siding.model import LaneHop
from siding.routing import story

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _route(
    lanes: str = 'lanes = [{ delay = "1s", attempts = 2 }, { delay = "5s" }]',
) -> RouteConfig:
    text = f"""
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "trips"
topic = "trips"
group = "billing"
endpoint = "grpc://127.0.0.1:9"
{lanes}
"""
    return parse_config(text).route[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", NOW - 7_200_000),
        ("1h30m", NOW - 5_400_000),
        ("1d", NOW - 86_400_000),
        ("2025-12-31T23:00:00Z", NOW - 3_600_000),
        ("2025-12-31T23:00:00", NOW - 3_600_000),
        ("2026-01-01T02:00:00+02:00", NOW),
    ],
)
def test_when_accepts_iso_times_and_ages(text: str, expected: int) -> None:
    assert parse_when(text, NOW) == expected


def test_bad_times_regexes_and_ranges_are_dlq_errors() -> None:
    with pytest.raises(DlqError, match="is not a time"):
        parse_when("yesterday", NOW)
    with pytest.raises(DlqError, match="not a regular expression"):
        build_filter(since=None, until=None, reason="(", key=None, now_ms=NOW)
    with pytest.raises(DlqError, match="--since must be before --until"):
        build_filter(since="1h", until="2h", reason=None, key=None, now_ms=NOW)
    with pytest.raises(DlqError, match="hex digits"):
        parse_key("hex:zz")


@pytest.mark.parametrize("key", [b"alice", b"\xff\x00", b"hex:looks-like-hex", b""])
def test_key_spec_round_trips(key: bytes) -> None:
    assert parse_key(key_spec(key)) == key


@pytest.mark.parametrize(
    ("data", "total", "expected"),
    [
        (None, None, "<null>"),
        (b"hello", None, "hello"),
        (b"a\nb", None, "a\\nb"),
        (b"\xff\xfe", None, "<binary 2 bytes: fffe>"),
        (b"\x00\x01text", None, "<binary 6 bytes: 000174657874>"),
        (bytes(20), None, "<binary 20 bytes: " + "00" * 16 + "…>"),
        ("caf\u00e9".encode()[:4], 5, "caf…"),  # cut inside the é
        (b"x" * 100, None, "x" * 59 + "…"),
    ],
)
def test_preview_is_one_safe_line(data: bytes | None, total: int | None, expected: str) -> None:
    assert preview(data, total) == expected


def _letter(headers: tuple[tuple[str, bytes], ...]) -> Letter:
    ref = LetterRef("siding.trips.dlq", 0, 9, "trips/3/42", NOW)
    return Letter(ref, b"k", b"v", headers, NOW)


def _dead_headers() -> tuple[tuple[str, bytes], ...]:
    told = story.StoryHeaders(
        origin=story.Origin("trips", 3, 42, NOW - 10),
        attempt=4,
        lane=2,
        not_before_ms=0,
        hops=(LaneHop(0, 1, NOW - 3, "retry"), LaneHop(1, 3, NOW - 2, "retry")),
        reason="exhausted",
        died_at_ms=NOW,
        route="trips",
    )
    return (("user", b"u"), *story.encode(told))


def test_replay_into_lane_one_keeps_the_identity_and_resets_the_attempt() -> None:
    record = replay_record(_letter(_dead_headers()), Target.LANE1, _route(), NOW + 5)
    told = story.decode(record.headers)
    assert record.topic == "siding.trips.retry-1" and (record.key, record.value) == (b"k", b"v")
    assert told is not None and told.origin.delivery_id == "trips/3/42"
    assert (told.attempt, told.lane, told.not_before_ms) == (2, 1, NOW + 5)
    assert told.hops[-1] == LaneHop(2, 4, NOW + 5, "replayed from DLQ")
    assert len(told.hops) == 3
    assert story.user_headers(record.headers) == (("user", b"u"),)


def test_replay_to_origin_links_the_original_id() -> None:
    headers = ((REPLAY_OF, b"older"), *_dead_headers())
    record = replay_record(_letter(headers), Target.ORIGIN, _route(), NOW)
    assert record.topic == "trips"
    assert record.headers == (("user", b"u"), (REPLAY_OF, b"trips/3/42"))


def test_a_letter_without_story_is_its_own_origin() -> None:
    record = replay_record(_letter((("user", b"u"),)), Target.LANE1, _route(), NOW)
    told = story.decode(record.headers)
    assert told is not None and told.origin.delivery_id == "siding.trips.dlq/0/9"


def test_lane_one_needs_lanes() -> None:
    assert resolve_target(None, _route()) is Target.LANE1
    assert resolve_target("origin", _route("")) is Target.ORIGIN
    with pytest.raises(DlqError, match="use --to origin"):
        resolve_target(None, _route(""))


def test_pacing_spreads_letters_over_time() -> None:
    assert (chunk_size(None), chunk_size(5), chunk_size(100), chunk_size(1e6)) == (500, 1, 10, 500)
    assert pause_s(0.0, 50, 100.0, 0.2) == pytest.approx(0.3)
    assert pause_s(0.0, 50, 100.0, 1.0) == 0.0
    assert pause_s(0.0, 50, None, 0.0) == 0.0


def test_fate_record_is_keyed_by_dlq_coordinates() -> None:
    ref = LetterRef("siding.trips.dlq", 1, 7, "trips/0/3", NOW)
    record = fate_record("s", ref, Fate.MERGED, at_ms=NOW + 1, by="a@b", to="x")
    assert record.key == b"siding.trips.dlq/1/7"
    value = json.loads(record.value or b"")
    assert value == {
        "fate": "merged",
        "id": "trips/0/3",
        "died_at": NOW,
        "at": NOW + 1,
        "by": "a@b",
        "to": "x",
    }
