"""Gathering sends into batches, and what a broken DeliverBatches stream means for each delivery."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.errors import ConfigError
from siding.model import OutcomeKind
from siding.transport.batching import BatchLimits, Gatherer, framed_size
from siding.transport.grpc_batch import batch_stream_ended
from siding.transport.grpc_stream import RESEND
from siding.v1 import consumer_pb2


def gatherer(
    max_items: int = 3, linger_s: float = 0.05, max_bytes: int = 100
) -> tuple[Gatherer[str], list[list[str]]]:
    flushed: list[list[str]] = []
    return Gatherer(BatchLimits(max_items, linger_s, max_bytes), flushed.append), flushed


async def test_a_full_batch_leaves_at_once() -> None:
    g, flushed = gatherer(max_items=3)
    for item in "abcd":
        g.add(item, 1)
    assert flushed == [["a", "b", "c"]]
    assert len(g) == 1


async def test_a_batch_leaves_after_linger_with_what_it_has() -> None:
    g, flushed = gatherer(max_items=10, linger_s=0.05)
    g.add("a", 1)
    await asyncio.sleep(0.02)
    g.add("b", 1)
    assert flushed == []
    await asyncio.sleep(0.06)  # the linger counts from the first item
    assert flushed == [["a", "b"]]


async def test_linger_zero_still_gathers_the_sends_of_one_turn_of_the_loop() -> None:
    g, flushed = gatherer(max_items=10, linger_s=0.0)
    for item in "abc":
        g.add(item, 1)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert flushed == [["a", "b", "c"]]


async def test_linger_zero_never_waits_and_leaves_nothing_scheduled() -> None:
    g, flushed = gatherer(max_items=10, linger_s=0.0)
    g.add("a", 1)
    await asyncio.sleep(0)  # one turn: the lone item left, no batch-mate awaited
    assert flushed == [["a"]]
    g.add("b", 1)
    g.add("c", 1)
    await asyncio.sleep(0)
    assert flushed == [["a"], ["b", "c"]]
    for _ in range(5):  # an empty gatherer schedules nothing: it does not spin
        await asyncio.sleep(0)
    assert g._timer is None and flushed == [["a"], ["b", "c"]]


async def test_a_batch_never_grows_past_its_bytes_and_a_big_item_goes_alone() -> None:
    g, flushed = gatherer(max_items=10, max_bytes=100)
    g.add("a", 60)
    g.add("b", 30)
    g.add("c", 20)  # 110 > 100: a and b leave first
    g.add("huge", 500)  # larger than a batch: alone
    g.add("d", 1)
    g.flush_now()
    assert flushed == [["a", "b"], ["c"], ["huge"], ["d"]]


async def test_two_copies_of_one_id_never_share_a_batch() -> None:
    g, flushed = gatherer(max_items=10)
    g.add("first copy", 1, key="orders/0/1")
    g.add("other", 1, key="orders/0/2")
    g.add("second copy", 1, key="orders/0/1")
    g.flush_now()
    assert flushed == [["first copy", "other"], ["second copy"]]


async def test_take_empties_without_flushing() -> None:
    g, flushed = gatherer()
    g.add("a", 1)
    assert g.take() == ["a"]
    await asyncio.sleep(0.1)
    assert flushed == []


@pytest.mark.parametrize(
    ("limits", "key"),
    [
        ((0, 0.005, 10), "batch.max"),
        ((1, -1.0, 10), "batch.linger"),
        ((1, 0.0, 0), "batch.max_bytes"),
    ],
)
def test_impossible_limits_are_refused(limits: tuple[int, float, int], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BatchLimits(*limits)
    assert caught.value.key == key


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=20))
def test_framed_sizes_add_up_to_the_batch_on_the_wire(values: list[bytes]) -> None:
    messages = [consumer_pb2.Delivery(id=f"t/0/{n}", value=v) for n, v in enumerate(values)]
    batch = consumer_pb2.DeliveryBatch(deliveries=messages)
    assert sum(framed_size(m.ByteSize()) for m in messages) == batch.ByteSize()


REFUSED = "stream broke: grpc RESOURCE_EXHAUSTED: Received message larger than max (5000 vs. 4000)"


def test_a_refused_frame_of_several_is_sent_again_and_its_limit_learned() -> None:
    # (written, frame bytes, deliveries in the frame)
    entries = [(True, 5000, 2), (True, 5000, 2), (True, 300, 3), (False, 0, 1)]
    outcomes, limit = batch_stream_ended(REFUSED, entries)
    assert limit == 4000
    # the refused frame's deliveries, an earlier frame's and the unwritten one: all sent again,
    # none a BACKOFF that would feed the breaker of a consumer that is up
    assert all(o is RESEND for o in outcomes)


def test_a_refused_frame_of_one_is_too_large() -> None:
    outcomes, limit = batch_stream_ended(REFUSED, [(True, 5000, 1), (False, 0, 1)])
    assert limit == 4000
    assert outcomes[0].kind is OutcomeKind.DEAD
    assert outcomes[0].reason.startswith("message too large: 5000 bytes")
    assert outcomes[1] is RESEND


def test_a_consumer_that_dies_makes_every_delivery_it_held_a_suspect() -> None:
    cause = "stream broke: grpc UNAVAILABLE: Socket closed"
    outcomes, limit = batch_stream_ended(cause, [(True, 900, 3), (True, 900, 3), (False, 0, 1)])
    assert limit is None
    assert [(o.kind, o.lost) for o in outcomes] == [
        (OutcomeKind.BACKOFF, True),
        (OutcomeKind.BACKOFF, True),
        (OutcomeKind.BACKOFF, False),  # never left: no suspect
    ]
    closed, _ = batch_stream_ended("transport closed", [(True, 900, 3)], ours=True)
    assert not closed[0].lost
