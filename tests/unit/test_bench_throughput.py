"""The throughput workload's pure parts: drain rate and CPU per 1,000 messages, the share-group
peer's tuning, the peer's ready line and the report's throughput table."""

from __future__ import annotations

from typing import Any

import pytest

from bench.peers import share_group
from bench.peers.common import json_lines
from bench.report import build_report, markdown
from bench.workloads import hol_peers, throughput
from bench.workloads.cpu import ProcStat, Usage
from bench.workloads.measure import drain, per_1000
from siding.devkit.sim_consumer import Received


def rec(i: int, received: float, attempt: int = 1) -> Received:
    return Received(f"t/0/{i}", attempt, received, None, i)


def test_drain_counts_each_message_once_from_first_receipt_to_last_done() -> None:
    # three messages, one received twice; the system started at 100.0, each takes 10 ms
    records = [rec(0, 102.0), rec(1, 102.5), rec(1, 103.5), rec(2, 104.0)]
    got = drain(records, lambda _r: 0.010, started_s=100.0, cpu_s=0.6, cpu_s_with_start=1.5)
    assert got.messages == 3
    assert got.seconds == pytest.approx(2.010)
    assert got.seconds_with_start == pytest.approx(4.010)
    assert got.msgs_per_s == round(3 / 2.010, 1)
    assert got.cpu_s_per_1000 == 200.0  # 0.6 CPU s / 3 messages x 1,000
    assert got.cpu_s_per_1000_with_start == 500.0


def test_an_empty_drain_has_no_rate_and_no_cost() -> None:
    got = drain([], lambda _r: 0.0, started_s=0.0, cpu_s=1.0, cpu_s_with_start=2.0)
    assert (got.messages, got.msgs_per_s, got.cpu_s_per_1000) == (0, None, None)
    assert per_1000(0.47, 1000) == 0.47
    assert per_1000(9.5, 20_000) == 0.475


def test_share_tuning_for_slow_messages_is_one_record_a_poll_by_littles_law() -> None:
    tuning = share_group.for_slow_messages(200.0, 0.209, headroom=2.0)
    assert (tuning.consumers, tuning.max_poll_records) == (84, 1)
    assert tuning == hol_peers.SHARE_HOL  # the HOL workload's: 0.9 x 10 ms + 0.1 x 2 s
    with pytest.raises(ValueError, match="headroom"):
        share_group.for_slow_messages(200.0, 0.2, headroom=0.5)


def test_share_tuning_for_a_backlog_keeps_the_in_flight_limit_in_big_polls() -> None:
    tuning = share_group.for_backlog(1000, consumers=10)
    assert (tuning.consumers, tuning.max_poll_records, tuning.in_flight) == (10, 100, 1000)
    assert share_group.for_backlog(1000, consumers=3).max_poll_records == 334  # rounded up
    assert throughput.SHARE_BACKLOG.in_flight == throughput.IN_FLIGHT
    with pytest.raises(ValueError, match="at least 1"):
        share_group.Tuning(consumers=0, max_poll_records=5)


def test_the_share_peer_command_names_group_url_and_tuning() -> None:
    argv = share_group.command(
        "cp",
        "127.0.0.1:9092",
        topic="orders",
        group="g",
        url="http://127.0.0.1:8080/",
        tuning=share_group.Tuning(10, 100),
    )
    assert argv[argv.index(share_group.MAIN_CLASS) + 1 :] == [
        "127.0.0.1:9092",
        "orders",
        "g",
        "http://127.0.0.1:8080/",
        "10",
        "100",
    ]


def test_json_lines_finds_the_ready_line_among_other_output() -> None:
    text = 'log line\n{"ready": true, "consumers": 84}\n{broken\n{"accepted": 3}\n'
    assert json_lines(text) == [{"ready": True, "consumers": 84}, {"accepted": 3}]


def test_every_throughput_system_is_measured_with_the_same_in_flight_limit() -> None:
    assert set(throughput.systems()) == {
        "siding_grpc_defaults",
        "siding_http_defaults",
        "benthos",
        "parallel_consumer_vertx",
        "share_group",
    }
    assert throughput.done_timeout_s(20_000) == 260.0


def test_the_report_shows_each_system_and_partition_count() -> None:
    run: dict[str, Any] = {
        "partitions": 1,
        "complete": True,
        "delivered": 20000,
        "drain_s": 8.6,
        "msgs_per_s": 2325.6,
        "cpu_s_per_1000": 0.47,
        "delivered_more_than_once": 0,
    }
    entry = {
        "name": "throughput",
        "messages": 20000,
        "systems": {
            "siding_http_defaults": {
                "runs": [run, {**run, "partitions": 8, "complete": False, "delivered": 19000}]
            },
            "share_group": {"runs": None, "error": "PeerUnavailable: mvn package failed"},
            "benthos": {"runs": [{"partitions": 1, "error": "WaitTimeout: nothing"}]},
        },
    }
    text = markdown(build_report("2 cores", [entry], 1.0, 0.0))
    assert "### Throughput: 20000 msgs already in the topic, 10 ms consumer" in text
    assert "| siding, HTTP webhooks, defaults | 1 | 8.600 | 2,326 | 0.470 | 0 |" in text
    assert "| siding, HTTP webhooks, defaults | 8 | 8.600 (19000 delivered) |" in text
    assert "not run: PeerUnavailable: mvn package failed" in text
    assert "| 1 | error: WaitTimeout: nothing |" in text


def test_a_peer_s_cpu_is_labelled_with_its_name_not_as_siding_s_driver() -> None:
    usage = Usage()
    usage.sample([ProcStat(10, 1, 0, own=5, start=1, name="java")])
    usage.sample([ProcStat(10, 1, 0, own=25, start=1, name="java")])
    assert usage.ticks_by_kind(10, root_kind="share_group") == {"share_group": 20}
    assert usage.ticks_by_kind(10) == {"driver (Python)": 20}
