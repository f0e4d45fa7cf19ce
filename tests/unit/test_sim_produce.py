"""The load producer's messages, built by pure functions (no broker needed)."""

from __future__ import annotations

import pytest

from siding.devkit.sim_consumer import PRODUCED_AT_HEADER, SEQ_HEADER, record_line
from siding.devkit.sim_produce import (
    due_time,
    message_headers,
    message_key,
    message_value,
    wait_for,
)


def test_keys_go_round_robin() -> None:
    assert [message_key(seq, 3) for seq in range(7)] == [
        b"k0", b"k1", b"k2", b"k0", b"k1", b"k2", b"k0"
    ]  # fmt: skip
    assert message_key(5, None) is None
    with pytest.raises(ValueError, match="at least 1"):
        message_key(0, 0)


def test_headers_carry_sequence_and_production_time() -> None:
    assert message_headers(41, 1700000000.25) == [
        ("sim-seq", b"41"),
        ("sim-produced-at", b"1700000000.250000"),
    ]


def test_the_sim_consumer_reads_what_the_producer_writes() -> None:
    headers = {k: v.decode() for k, v in message_headers(7, 12.5)}
    assert (SEQ_HEADER, PRODUCED_AT_HEADER) == ("sim-seq", "sim-produced-at")
    assert record_line("t/0/7", 1, 13.0, headers) == "t/0/7,1,13.000000,12.500000,7\n"


def test_values_differ_per_message() -> None:
    assert message_value(1) != message_value(2)


def test_rate_spaces_messages_evenly() -> None:
    assert [due_time(100.0, i, 4.0) for i in range(3)] == [100.0, 100.25, 100.5]
    assert due_time(100.0, 50, None) == 100.0


def test_the_rate_is_kept_when_poll_returns_early() -> None:
    # Given a producer whose poll returns after a tenth of its timeout (it served a delivery
    # report, as it does for every message at a steady rate)
    now = [100.0]
    polls: list[float] = []

    def poll(timeout_s: float) -> None:
        polls.append(timeout_s)
        now[0] += max(timeout_s / 10, 0.001)

    # When the next message is due at 100.01
    wait_for(100.01, poll, clock=lambda: now[0])
    # Then it polled until then, not once
    assert now[0] >= 100.01
    assert len(polls) > 1
    # and a message already due waits for nothing
    polls.clear()
    wait_for(50.0, poll, clock=lambda: now[0])
    assert polls == []
