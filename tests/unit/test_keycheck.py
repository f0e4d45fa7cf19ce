"""The key-order check of the benchmark and the e2e tests: first ACKs per key, in order."""

from __future__ import annotations

from siding.devkit.keycheck import first_acks, order_violations
from siding.devkit.sim_consumer import Behaviour, Received

RULE = Behaviour(retry_every=2, keys=2)  # seq 2, 3 (the second message of k0, k1) fail once


def got(seq: int, attempt: int, at: float) -> Received:
    return Received(f"t/0/{seq}", attempt, at, None, seq)


def test_a_retried_message_is_acked_by_its_second_attempt() -> None:
    records = [got(0, 1, 1.0), got(2, 1, 2.0), got(2, 2, 3.0), got(0, 1, 9.0)]
    firsts = first_acks(records, RULE)
    assert (firsts["t/0/0"].received_s, firsts["t/0/2"].attempt) == (1.0, 2)


def test_order_held_when_later_messages_wait_for_the_retry() -> None:
    # k0: seq 0, then 2 (RETRY, then ACK), then 4; a crash redelivers 0 at the end
    records = [got(0, 1, 1.0), got(2, 1, 2.0), got(2, 2, 3.0), got(4, 1, 4.0), got(0, 1, 9.0)]
    assert order_violations(records, RULE, keys=2) == []


def test_a_message_acked_while_an_earlier_one_waits_is_a_violation() -> None:
    # k0: 4 is ACKed at 2.5 while 2 waits for its retry (ACKed at 3.0)
    records = [got(0, 1, 1.0), got(2, 1, 2.0), got(4, 1, 2.5), got(2, 2, 3.0)]
    assert order_violations(records, RULE, keys=2) == ["k0: seq 4 ACKed before seq 2"]
