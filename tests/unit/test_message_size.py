"""A message too large for the consumer is a poison pill, never an outage that loops for ever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from siding.config import parse_config
from siding.consumer import ConsumerServer, Reply, ack
from siding.consumer import Delivery as ConsumerDelivery
from siding.model import Delivery, OutcomeKind, delivery_id
from siding.pipeline.executor.rows import Incoming, wire_size
from siding.pipeline.executor.task import screen
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import RESEND, GrpcStreamTransport, stream_ended
from siding.transport.grpc_unary import GrpcUnaryTransport
from siding.transport.outcomes import outcome_from_grpc, outcome_from_http, oversize
from siding.v1 import consumer_pb2, consumer_pb2_grpc

MiB = 1024 * 1024


def route_config(endpoint: str, extra: str = "") -> str:
    return f"""
[kafka]
bootstrap = "localhost:9092"
[[route]]
name = "r"
topic = "t"
group = "g"
endpoint = "{endpoint}"
{extra}
"""


def item(offset: int, size: int) -> Incoming:
    return Incoming(Delivery(delivery_id("t", 0, offset), "t", 0, offset, b"k", b"x" * size))


def test_grpc_size_refusals_are_dead_and_other_exhaustion_backs_off() -> None:
    big = outcome_from_grpc(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (6291456 vs. 4194304)"
    )
    assert big.kind is OutcomeKind.DEAD
    assert "too large" in big.reason and "6291456" in big.reason
    busy = outcome_from_grpc(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many requests")
    assert busy.kind is OutcomeKind.BACKOFF


def test_http_413_is_dead_with_its_reason() -> None:
    outcome = outcome_from_http(413)
    assert outcome.kind is OutcomeKind.DEAD
    assert "too large" in outcome.reason


@pytest.mark.parametrize(
    ("endpoint", "extra", "limit"),
    [
        ("grpc://localhost:50051", "", 4 * MiB),
        ("http://localhost:8080/", "", 0),
        ("grpc://localhost:50051", "max_message_bytes = 16777216", 16 * MiB),
        ("https://example.test/hook", "max_message_bytes = 1048576", MiB),
    ],
)
def test_the_route_limit_defaults_to_the_transports_own(
    endpoint: str, extra: str, limit: int
) -> None:
    assert parse_config(route_config(endpoint, extra)).route[0].message_limit == limit


def test_records_over_the_limit_are_marked_with_their_size_and_others_pass() -> None:
    items = [item(0, 100), item(1, 5 * MiB), item(2, 4 * MiB - 4096)]
    screened = screen(items, 4 * MiB)
    assert [bool(i.malformed) for i in screened] == [False, True, False]
    assert f"{wire_size(items[1].delivery)} bytes" in screened[1].malformed
    assert "max_message_bytes=4194304" in screened[1].malformed
    assert screen(items, 0) == items  # no limit


Context = grpc.aio.ServicerContext[object, object]


class AckAll(consumer_pb2_grpc.ConsumerServicer):
    async def Deliver(
        self, request: consumer_pb2.Delivery, _context: Context
    ) -> consumer_pb2.Result:
        return consumer_pb2.Result(delivery_id=request.id, verdict=consumer_pb2.VERDICT_ACK)

    async def DeliverStream(
        self, request_iterator: AsyncIterator[consumer_pb2.Delivery], _context: Context
    ) -> AsyncIterator[consumer_pb2.Result]:
        async for request in request_iterator:
            yield consumer_pb2.Result(delivery_id=request.id, verdict=consumer_pb2.VERDICT_ACK)

    async def DeliverBatches(
        self, _requests: AsyncIterator[consumer_pb2.DeliveryBatch], context: Context
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        # A consumer written before batched delivery: it does not implement the call.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "batched delivery is not implemented")
        yield consumer_pb2.ResultBatch()


async def test_a_consumer_with_grpcs_default_receive_limit_refuses_a_6_mib_delivery_as_dead() -> (
    None
):
    # Given a consumer server that keeps gRPC's default 4 MiB receive limit (most do)
    server = grpc.aio.server()
    consumer_pb2_grpc.add_ConsumerServicer_to_server(AckAll(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    transport = GrpcUnaryTransport(ChannelSpec(f"127.0.0.1:{port}"))
    try:
        # When a 6 MiB delivery is sent, and then a small one
        big = await transport.send(item(1, 6 * MiB).delivery, 10)
        small = await transport.send(item(2, 10).delivery, 10)
    finally:
        await transport.close()
        await server.stop(0)
    # Then the big one is DEAD (too large), not "slow down", and the endpoint still works
    assert big.kind is OutcomeKind.DEAD, big
    assert "too large" in big.reason
    assert small.kind is OutcomeKind.ACK


async def slow_ack(_d: ConsumerDelivery) -> Reply:
    await asyncio.sleep(0.3)  # still out when the big one arrives
    return ack()


async def test_on_the_stream_only_the_delivery_the_consumer_refused_for_its_size_is_dead() -> None:
    # Given a stream consumer (it reads ahead, as the SDKs do) with a 1 MiB receive limit and
    # siding's own limit above it
    limit = (("grpc.max_receive_message_length", MiB),)
    async with ConsumerServer(slow_ack, options=limit) as server:
        transport = GrpcStreamTransport(ChannelSpec(server.target))
        try:
            # When ten small deliveries are out and a 2 MiB one follows (the consumer breaks
            # the stream with the small ones in its hands)
            small = [
                asyncio.create_task(transport.send(item(n, 10).delivery, 10)) for n in range(10)
            ]
            await asyncio.sleep(0.05)
            big = await transport.send(item(99, 2 * MiB).delivery, 10)
            answers = await asyncio.gather(*small)
        finally:
            await transport.close()
    # Then the big one is DEAD with both sizes
    assert big.kind is OutcomeKind.DEAD, big
    assert "too large" in big.reason and f"accepts at most {MiB}" in big.reason
    # And the small ones went again on a new stream and were answered: not one BACKOFF (ten
    # would open the breaker of a consumer that is up) and not one suspect
    assert [a.kind for a in answers] == [OutcomeKind.ACK] * 10, answers


def test_a_size_refusal_sends_every_other_delivery_of_the_stream_again() -> None:
    cause = "stream broke: grpc RESOURCE_EXHAUSTED: Received message larger than max (999 vs. 100)"
    refused, written, unsent = stream_ended(cause, [(True, 999), (True, 10), (False, 12)])
    assert refused.kind is OutcomeKind.DEAD
    assert written is RESEND and unsent is RESEND


def test_a_broken_stream_suspects_only_what_was_written() -> None:
    cause = "stream broke: grpc UNAVAILABLE: Socket closed"
    written, unsent = stream_ended(cause, [(True, 10), (False, 12)])
    assert written.lost and written.kind is OutcomeKind.BACKOFF
    assert not unsent.lost and unsent.kind is OutcomeKind.BACKOFF
    # ... and nothing when we closed it ourselves, or it never connected
    assert not any(o.lost for o in stream_ended(cause, [(True, 10)], ours=True))
    refused = "grpc UNAVAILABLE: failed to connect to all addresses; Connection refused"
    assert not any(o.lost for o in stream_ended(refused, [(True, 10)]))


def test_a_size_refusal_that_matches_no_delivery_suspects_what_was_written() -> None:
    cause = "grpc RESOURCE_EXHAUSTED: Received message larger than max (999 vs. 100)"
    assert [o.lost for o in stream_ended(cause, [(True, 10), (True, 12)])] == [True, True]
    assert oversize(cause) == (999, 100)


@pytest.mark.parametrize(
    ("details", "gone"),
    [
        ("Stream removed (Socket closed)", True),
        ("recvmsg:Connection reset by peer", True),
        ("failed to connect to all addresses; last error: Connection reset by peer", False),
        ("dependency down, try later", False),  # the consumer's own UNAVAILABLE
    ],
)
def test_unavailable_is_a_lost_call_only_in_grpcs_own_words(details: str, gone: bool) -> None:
    outcome = outcome_from_grpc(grpc.StatusCode.UNAVAILABLE, details)
    assert outcome.kind is OutcomeKind.BACKOFF
    assert outcome.lost is gone
