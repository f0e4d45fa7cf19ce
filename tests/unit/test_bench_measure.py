"""The benchmark's pure measurements: percentiles, spans, rates, latency, /proc parsing."""

from __future__ import annotations

import math

import pytest

from bench.workloads.cpu import ProcStat, Usage, children_of, parse_stat, tree_ticks
from bench.workloads.measure import (
    done_span_s,
    extrapolated_seconds,
    first_receipts,
    latencies_ms,
    percentile,
    planned_delay,
    rate_per_s,
    ratio,
)
from siding.devkit.sim_consumer import Behaviour, Received


def rec(i: int, received: float, produced: float | None = None, attempt: int = 1) -> Received:
    return Received(f"t/0/{i}", attempt, received, produced, i)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 50, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([3.0, 1.0, 2.0], 0, 1.0),
        ([3.0, 1.0, 2.0], 100, 3.0),
        (list(map(float, range(1, 101))), 99, 99.01),
    ],
)
def test_percentile_interpolates_between_closest_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_refuses_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_redeliveries_do_not_count_twice_and_keep_the_first_attempt() -> None:
    records = [rec(0, 10.0), rec(1, 11.0), rec(1, 15.0, attempt=2), rec(2, 12.0)]
    firsts = first_receipts(records)
    assert {i: r.received_s for i, r in firsts.items()} == {
        "t/0/0": 10.0,
        "t/0/1": 11.0,
        "t/0/2": 12.0,
    }
    # three distinct messages, received over 2 s, the last one done 2 s after its receipt
    assert rate_per_s(records, lambda _: 2.0) == pytest.approx(0.75)


def test_done_span_counts_the_last_message_s_processing_time() -> None:
    # 1,000 messages received at once, each taking 1 s: 1,000 msg/s, not infinite
    wave = [rec(i, 5.0 + i * 1e-6) for i in range(1000)]
    assert done_span_s(wave, lambda _: 1.0) == pytest.approx(1.0, abs=1e-3)
    assert rate_per_s(wave, lambda _: 1.0) == pytest.approx(1000, rel=1e-3)
    assert math.isinf(rate_per_s([rec(0, 1.0), rec(1, 1.0)], lambda _: 0.0))


def test_planned_delay_is_the_sim_consumer_s_own_plan() -> None:
    slow = Behaviour(latency_s=(0.25, 0.25), slow_ratio=1.0, slow_latency_s=3.0)
    assert planned_delay(Behaviour(latency_s=(0.25, 0.25)))(rec(7, 0.0)) == 0.25
    assert planned_delay(slow)(rec(7, 0.0)) == 3.0


def test_latency_is_receipt_minus_produce_for_chosen_ids_only() -> None:
    records = [rec(0, 10.5, 10.0), rec(1, 11.0, 10.9), rec(2, 12.0, None), rec(3, 20.0, 10.0)]
    assert sorted(latencies_ms(records, {"t/0/0", "t/0/1", "t/0/2"})) == pytest.approx(
        [100.0, 500.0]
    )


def test_extrapolation_and_ratio() -> None:
    assert extrapolated_seconds(10_000, 250.0) == 40.0
    with pytest.raises(ValueError, match="positive"):
        extrapolated_seconds(1, 0.0)
    assert ratio(900.0, 1000.0) == 0.9
    assert ratio(None, 1.0) is None
    assert ratio(1.0, 0.0) is None


def test_proc_stat_line_with_spaces_and_parentheses_in_the_name() -> None:
    fields = ["S", "42"] + ["0"] * 9 + ["100", "20", "3", "4"] + ["0"] * 30
    stat = parse_stat("1234 (python (worker) x) " + " ".join(fields))
    assert stat == ProcStat(1234, 42, 127, own=120, start=0, name="python (worker) x")


def test_tree_ticks_leave_out_excluded_subtrees() -> None:
    # 1 -> 2 (spark jvm) -> 3 (python worker); 1 -> 4 (broker) -> 5; 9 is unrelated
    stats = {
        p.pid: p
        for p in (
            ProcStat(1, 0, 10),
            ProcStat(2, 1, 100),
            ProcStat(3, 2, 1000),
            ProcStat(4, 1, 5000),
            ProcStat(5, 4, 7),
            ProcStat(9, 0, 99999),
        )
    }
    assert tree_ticks(stats, 1, exclude={4}) == 1110
    assert tree_ticks(stats, 1, exclude=set()) == 6117
    assert tree_ticks(stats, 2, exclude={3}) == 100
    assert children_of(1, stats) == {2, 4}


def test_cpu_usage_counts_each_process_from_first_sight_and_one_that_ended_up_to_its_last() -> None:
    usage = Usage()
    # first sample: the driver (root 1) and an old process of an earlier workload (7)
    usage.sample([ProcStat(1, 0, 0, own=100, start=5), ProcStat(7, 1, 0, own=9000, start=6)])
    # later: the JVM and a Python worker are born; 7 ends (gone from later samples)
    usage.sample(
        [
            ProcStat(1, 0, 0, own=130, start=5),
            ProcStat(2, 1, 0, own=50, start=20, name="java"),
            ProcStat(3, 2, 0, own=40, start=21, name="python3.11"),
            ProcStat(7, 1, 0, own=9010, start=6),
        ]
    )
    usage.sample(
        [
            ProcStat(1, 0, 0, own=150, start=5),
            ProcStat(2, 1, 0, own=80, start=20, name="java"),
            ProcStat(3, 2, 0, own=60, start=21, name="python3.11"),
            # pid 7 again, but another process: counts from 0
            ProcStat(7, 1, 0, own=3, start=99, name="sh"),
        ]
    )
    assert usage.ticks_by_kind(root=1) == {
        "driver (Python)": 50,
        "Spark JVM": 80,
        "Spark Python workers": 60,
        "other": 10,  # the old process: only what it used inside the window
        "sh": 3,
    }
