"""Pure decisions of ``siding offsets``: reset targets, the old -> new plan, and what a group
moved by another tool means at start."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.errors import OffsetsError
from siding.kafka.admin import Committed
from siding.pipeline.offline import positions
from siding.pipeline.offline.positions import Target, plan, start_verdict, targets

EXTENTS = {0: (0, 100), 1: (40, 60), 2: (0, 0)}
OURS = positions.mark("batch=7")


@pytest.mark.parametrize(
    ("target", "by_time", "expected"),
    [
        (Target("earliest"), {}, {0: 0, 1: 40, 2: 0}),
        (Target("latest"), {}, {0: 100, 1: 60, 2: 0}),
        # no record that late in partitions 1 and 2: the log end, as Kafka's own tool does
        (Target("datetime", at_ms=5), {0: 17, 1: None, 2: None}, {0: 17, 1: 60, 2: 0}),
        (Target("offsets", offsets={1: 45}), {}, {1: 45}),
        (Target("offsets", offsets={0: 100, 1: 40}), {}, {0: 100, 1: 40}),
    ],
)
def test_each_target_names_one_offset_per_partition(
    target: Target, by_time: dict[int, int | None], expected: dict[int, int]
) -> None:
    assert targets(target, EXTENTS, by_time) == expected


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ({1: 39}, "partition 1 offset 39 is before the log start 40"),
        ({1: 61}, "partition 1 offset 61 is past the log end 60"),
        ({7: 0}, "partition 7 does not exist (partitions: 0, 1, 2)"),
    ],
)
def test_an_offset_outside_the_log_is_refused_not_clamped(
    offsets: dict[int, int], message: str
) -> None:
    with pytest.raises(OffsetsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        targets(Target("offsets", offsets=offsets), EXTENTS, {})


def test_offsets_parse_as_partition_colon_offset() -> None:
    assert positions.parse_offsets("0:12, 3:0") == {0: 12, 3: 0}
    with pytest.raises(OffsetsError, match="'0=12' is not PARTITION:OFFSET"):
        positions.parse_offsets("0=12")
    with pytest.raises(OffsetsError, match="partition 1 is given twice"):
        positions.parse_offsets("1:2,1:3")
    with pytest.raises(OffsetsError, match="'-1:3' is not"):
        positions.parse_offsets("-1:3")


def test_times_are_iso_in_utc_unless_zoned_and_ages_count_back_from_now() -> None:
    assert positions.parse_datetime("1970-01-01T00:00:01Z") == 1000
    assert positions.parse_datetime("1970-01-01T00:00:01") == 1000
    assert positions.parse_datetime("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(OffsetsError, match="--to-datetime 'yesterday' is not an ISO time"):
        positions.parse_datetime("yesterday")
    assert positions.parse_age("2h", now_ms=10_000_000) == 10_000_000 - 7_200_000
    with pytest.raises(OffsetsError, match="--by-duration"):
        positions.parse_age("2", now_ms=0)


def test_the_plan_moves_only_the_named_partitions_and_keeps_the_others() -> None:
    group = {0: Committed(50, OURS), 1: Committed(45, "")}
    planned = plan(EXTENTS, {0: 50, 1: 50}, group, {1: 41})
    rows = {r.partition: r for r in planned.rows}
    assert (rows[0].checkpoint, rows[0].group, rows[0].new, rows[0].moves) == (50, 50, 50, False)
    assert (rows[1].checkpoint, rows[1].group, rows[1].new, rows[1].moves) == (50, 45, 41, True)
    assert rows[1].group_by_siding is False and rows[0].group_by_siding is True
    # partition 2 is not in the checkpoint (added later): it stays unset, Spark reads it from
    # its start
    assert rows[2].new is None and not rows[2].moves
    assert planned.moves and planned.new_offsets() == {0: 50, 1: 41}


def test_a_plan_that_changes_nothing_does_not_move_and_a_group_apart_does() -> None:
    group = {0: Committed(50, OURS), 1: Committed(50, OURS)}
    assert not plan(EXTENTS, {0: 50, 1: 50}, group, {0: 50}).moves
    # the same target, but the group trails: executing brings it along
    behind = {0: Committed(49, OURS), 1: Committed(50, OURS)}
    assert plan(EXTENTS, {0: 50, 1: 50}, behind, {0: 50}).moves


def test_without_a_checkpoint_the_group_is_the_position_and_lag_counts_from_it() -> None:
    planned = plan(EXTENTS, None, {0: Committed(70, "")})
    rows = {r.partition: r for r in planned.rows}
    assert rows[0].position == 70 and rows[0].lag == 30 and rows[0].new == 70
    assert rows[1].position is None and rows[1].lag is None and rows[1].new is None
    assert not planned.moves


def test_lag_counts_from_the_checkpoint_not_from_the_group() -> None:
    (row,) = plan({0: (0, 100)}, {0: 90}, {0: Committed(10, "")}).rows
    assert row.lag == 10


@pytest.mark.parametrize(
    ("checkpoint", "group", "moved", "behind"),
    [
        # in step
        ({0: 5, 1: 9}, {0: Committed(5, OURS), 1: Committed(9, "")}, {}, {}),
        # siding's commit did not land before a crash: commit it again, nothing is moved
        ({0: 5, 1: 9}, {0: Committed(3, OURS), 1: Committed(9, OURS)}, {}, {0: 5}),
        # kafka-consumer-groups --reset-offsets (no metadata) while stopped: honoured
        ({0: 5, 1: 9}, {0: Committed(2, ""), 1: Committed(9, OURS)}, {0: 2}, {}),
        ({0: 5}, {0: Committed(8, "someone else")}, {0: 8}, {}),
        # no commit at all (group deleted): commit the checkpoint's
        ({0: 5, 1: 9}, {1: Committed(9, OURS)}, {}, {0: 5}),
        # a partition the checkpoint does not have yet, committed by another tool
        ({0: 5}, {0: Committed(5, OURS), 1: Committed(4, "")}, {1: 4}, {}),
    ],
)
def test_the_group_at_start_is_in_step_behind_or_moved(
    checkpoint: dict[int, int],
    group: dict[int, Committed],
    moved: dict[int, int],
    behind: dict[int, int],
) -> None:
    verdict = start_verdict(checkpoint, group)
    assert dict(verdict.moved) == moved
    assert dict(verdict.behind) == behind


@given(
    st.dictionaries(st.integers(0, 5), st.integers(0, 1000), max_size=6),
    st.dictionaries(
        st.integers(0, 5),
        st.tuples(st.integers(0, 1000), st.sampled_from(["", OURS, "x"])),
        max_size=6,
    ),
)
def test_siding_never_adopts_its_own_commits_and_never_leaves_a_gap(
    checkpoint: dict[int, int], raw: dict[int, tuple[int, str]]
) -> None:
    group = {p: Committed(o, m) for p, (o, m) in raw.items()}
    verdict = start_verdict(checkpoint, group)
    for p in verdict.moved:
        assert not positions.by_siding(group[p].metadata)
        assert group[p].offset != checkpoint.get(p)
    # after the verdict is carried out, the group equals the checkpoint on every partition the
    # checkpoint has, or the checkpoint follows the group
    for p, at in checkpoint.items():
        now = group[p].offset if p in group else None
        after = verdict.moved.get(p, verdict.behind.get(p, now))
        assert after == verdict.moved.get(p, at)


def test_the_marks_and_the_audit_event() -> None:
    assert positions.by_siding(positions.mark("reset"))
    assert not positions.by_siding("") and not positions.by_siding("sidingx")
    planned = plan({0: (0, 10)}, {0: 4}, {0: Committed(4, OURS)}, {0: 9})
    event = positions.audit_event(
        at_ms=0,
        by="me@host",
        command="offsets reset",
        route="r",
        topic="t",
        group="g",
        checkpoint="/ck/r/main",
        batch=3,
        target=Target("offsets", offsets={0: 9}).describe(),
        plan=planned,
    )
    assert event["at"] == "1970-01-01T00:00:00.000+00:00"
    assert event["target"] == "to-offset 0:9"
    assert event["partitions"] == [{"partition": 0, "checkpoint": 4, "group": 4, "new": 9}]
    assert event["count"] == 1
    assert positions.describe_moves({0: (4, 9), 1: (None, 2)}) == (
        "partition 0 4 -> 9, partition 1 (none) -> 2"
    )
