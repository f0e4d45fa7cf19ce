"""``siding backfill``'s pure parts: bounds, ranges, chunks, resume state, rate and ETA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from siding.cli import main
from siding.config import parse_config
from siding.pipeline.driver.backfill import backfill_route
from siding.pipeline.driver.backfill_range import (
    BackfillError,
    Bound,
    State,
    check_partitions,
    chunks,
    rate_and_eta,
    remaining,
    resolve,
    spark_offsets,
    total,
)
from siding.pipeline.driver.backfill_range import parse_bound as _parse

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
EXTENTS = {"t": {0: (5, 100), 1: (0, 40)}}


def parse(text: str, single: str | None = "t") -> Bound:
    return _parse(text, single_topic=single, now_ms=NOW, option="--from")


def test_bounds_are_times_ages_ends_or_offsets() -> None:
    assert parse("2026-01-01T01:00:00+01:00") == Bound(
        "time", at_ms=NOW, text="2026-01-01T01:00:00+01:00"
    )
    assert parse("2025-12-31T23:00:00Z").at_ms == NOW - 3_600_000
    assert parse("2025-12-31T23:00:00").at_ms == NOW - 3_600_000  # UTC unless it says
    assert parse("1h30m").at_ms == NOW - 5_400_000
    assert parse("earliest").kind == "earliest" and parse("latest").kind == "latest"
    assert parse("0:10,1:20").offsets == {"t": {0: 10, 1: 20}}
    assert parse("a:0:1,b.c:2:3", single=None).offsets == {"a": {0: 1}, "b.c": {2: 3}}


@pytest.mark.parametrize(
    ("text", "single", "message"),
    [
        ("yesterday", "t", "--from 'yesterday': give an ISO time"),
        ("0:1", None, "the route reads several topics: write TOPIC:P:O"),
        ("2h,0:1", "t", "give an ISO time"),
    ],
)
def test_a_bad_bound_names_the_option_and_the_value(
    text: str, single: str | None, message: str
) -> None:
    with pytest.raises(BackfillError, match=message):
        parse(text, single)


def test_offsets_resolve_to_a_range_per_partition_within_the_log() -> None:
    ranges = resolve(parse("0:10,1:0"), parse("0:20"), EXTENTS, {})
    # partition 1 has no --to offset: it ends at its log end
    assert ranges == {("t", 0): (10, 20), ("t", 1): (0, 40)}
    # a partition --from does not name starts at its log end: nothing
    assert resolve(parse("0:10"), parse("latest"), EXTENTS, {}) == {("t", 0): (10, 100)}
    assert resolve(parse("earliest"), parse("latest"), EXTENTS, {}) == {
        ("t", 0): (5, 100),
        ("t", 1): (0, 40),
    }


def test_times_resolve_through_the_offsets_kafka_finds_for_them() -> None:
    start, end = parse("2h"), parse("1h")
    by_time = {
        ("t", start.at_ms): {0: 50, 1: None},
        ("t", end.at_ms): {0: 70, 1: None},
    }
    # partition 1 has no record that late: it resolves to its log end, an empty range
    assert resolve(start, end, EXTENTS, by_time) == {("t", 0): (50, 70)}


def test_offsets_outside_the_log_or_of_unknown_partitions_are_refused() -> None:
    with pytest.raises(BackfillError, match=r"t partition 0 holds 5\.\.100, not 2"):
        resolve(parse("0:2"), parse("latest"), EXTENTS, {})
    with pytest.raises(BackfillError, match="t has no partition 7"):
        check_partitions(parse("7:1"), EXTENTS)
    with pytest.raises(BackfillError, match="the route does not read u"):
        resolve(parse("u:0:1", None), parse("latest"), EXTENTS, {})


def test_chunks_spread_over_partitions_and_skip_what_is_done() -> None:
    ranges = {("t", 0): (0, 10), ("t", 1): (100, 103)}
    assert chunks(ranges, {}, 4) == [
        {("t", 0): (0, 2), ("t", 1): (100, 102)},
        {("t", 0): (2, 4), ("t", 1): (102, 103)},
        {("t", 0): (4, 6)},
        {("t", 0): (6, 8)},
        {("t", 0): (8, 10)},
    ]
    assert chunks(ranges, {("t", 0): 9, ("t", 1): 103}, 100) == [{("t", 0): (9, 10)}]
    assert chunks(ranges, {("t", 0): 10, ("t", 1): 103}, 100) == []
    assert total(ranges) == 13 and remaining(ranges, {("t", 0): 9}) == 4


def test_a_chunk_is_spark_starting_and_ending_offsets() -> None:
    starting, ending = spark_offsets({("t", 0): (0, 2), ("u", 3): (100, 102)})
    assert json.loads(starting) == {"t": {"0": 0}, "u": {"3": 100}}
    assert json.loads(ending) == {"t": {"0": 2}, "u": {"3": 102}}


def test_the_resume_state_round_trips() -> None:
    state = State(
        ranges={("t", 0): (0, 10), ("a.b", 2): (5, 6)},
        done={("t", 0): 4},
        counts={"records": 4, "acked": 3, "laned": 0, "dead": 1},
        started_at_ms=NOW,
        range_text="0:0..latest",
    )
    assert State.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="not a backfill state"):
        State.from_json('{"version": 99}')


def test_rate_and_eta() -> None:
    assert rate_and_eta(0, 1.0, 10) == (None, None)
    assert rate_and_eta(100, 2.0, 500) == (50.0, 10.0)


ROUTE = """
[kafka]
bootstrap = "127.0.0.1:9092"
[[route]]
name = "r"
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:9"
max_in_flight = 500
adaptive = { min_in_flight = 50 }
"""


def test_a_backfill_delivers_with_its_own_limit_and_never_parks() -> None:
    route = parse_config(ROUTE, env={}).route[0]
    copy = backfill_route(route, 20)
    assert (copy.max_in_flight, copy.adaptive.min_in_flight, copy.parks) == (20, 20, False)
    assert (route.max_in_flight, route.parks) == (500, True)


def test_the_command_refuses_a_bad_bound_before_it_touches_kafka(tmp_path: Path) -> None:
    config = tmp_path / "siding.toml"
    config.write_text(ROUTE)
    main._register()
    args = ["backfill", "-c", str(config), "--route", "r", "--from", "yesterday", "--to", "latest"]
    result = CliRunner().invoke(main.cli, args)
    assert isinstance(result.exception, BackfillError)
    assert "--from 'yesterday': give an ISO time" in str(result.exception)
