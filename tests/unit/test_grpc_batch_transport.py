"""The gRPC batch transport against real grpc.aio servers on loopback: frames, per-delivery
results and deadlines, a consumer that dies with a frame, and one that only knows DeliverStream."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import pytest

from siding.consumer import ConsumerServer, Reply, ack, dead, retry
from siding.devkit.sim_consumer import SimConsumerProcess
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport.batching import BatchLimits
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import CORE_WRITE_ERROR, GrpcStreamTransport
from siding.v1 import consumer_pb2, consumer_pb2_grpc

Context = grpc.aio.ServicerContext[object, object]
if TYPE_CHECKING:  # generic in grpc's stubs only
    _Handler = grpc.GenericRpcHandler[consumer_pb2.Delivery, consumer_pb2.Result]
else:
    _Handler = grpc.GenericRpcHandler
LIMITS = BatchLimits(max_items=8, linger_s=0.01, max_bytes=4 << 20)
ODD = bytes(range(256))  # every byte value, NUL and 0xff included


def delivery(n: int, key: bytes | None = None, value: bytes | None = b"v") -> Delivery:
    return Delivery(f"orders/0/{n}", "orders", 0, n, key=key, value=value)


class Frames(consumer_pb2_grpc.ConsumerServicer):
    """Answers each frame in reverse order, split over two ResultBatch frames; the key says the
    verdict ("hold": never answered, "die": the consumer fails the whole call)."""

    def __init__(self) -> None:
        self.frames: list[int] = []

    async def Deliver(
        self,
        request: consumer_pb2.Delivery,  # noqa: ARG002
        context: Context,
    ) -> consumer_pb2.Result:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "batches only")

    async def DeliverStream(
        self,
        request_iterator: AsyncIterator[consumer_pb2.Delivery],  # noqa: ARG002
        context: Context,
    ) -> AsyncIterator[consumer_pb2.Result]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "batches only")
        yield consumer_pb2.Result()

    async def DeliverBatches(
        self, request_iterator: AsyncIterator[consumer_pb2.DeliveryBatch], context: Context
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        verdicts = {b"retry": consumer_pb2.VERDICT_RETRY, b"dead": consumer_pb2.VERDICT_DEAD}
        async for frame in request_iterator:
            self.frames.append(len(frame.deliveries))
            if any(d.key == b"die" for d in frame.deliveries):
                await context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
            results = [
                consumer_pb2.Result(
                    delivery_id=d.id, verdict=verdicts.get(d.key, consumer_pb2.VERDICT_ACK),
                    reason=d.key.decode(),
                )
                for d in reversed(frame.deliveries)
                if d.key != b"hold"
            ]  # fmt: skip
            half = len(results) // 2
            yield consumer_pb2.ResultBatch(results=results[:half])
            yield consumer_pb2.ResultBatch(results=results[half:])


@asynccontextmanager
async def served(servicer: object) -> AsyncIterator[str]:
    server = grpc.aio.server()
    if isinstance(servicer, consumer_pb2_grpc.ConsumerServicer):
        consumer_pb2_grpc.add_ConsumerServicer_to_server(servicer, server)
    else:
        server.add_generic_rpc_handlers((servicer,))  # type: ignore[arg-type]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


@asynccontextmanager
async def batching(target: str, limits: BatchLimits = LIMITS) -> AsyncIterator[GrpcBatchTransport]:
    transport = GrpcBatchTransport(ChannelSpec(target), limits=limits)
    try:
        yield transport
    finally:
        await transport.close()


async def test_concurrent_sends_travel_in_frames_and_each_gets_its_own_verdict() -> None:
    servicer = Frames()
    keys = [b"ack", b"retry", b"dead"] * 6
    async with served(servicer) as target, batching(target) as t:
        outcomes = await asyncio.gather(*(t.send(delivery(n, k), 5) for n, k in enumerate(keys)))
    assert [o.kind for o in outcomes] == [
        {b"ack": OutcomeKind.ACK, b"retry": OutcomeKind.RETRY, b"dead": OutcomeKind.DEAD}[k]
        for k in keys
    ]
    assert outcomes[2].reason == "dead"
    assert sum(servicer.frames) == len(keys)
    assert max(servicer.frames) == LIMITS.max_items  # batched, and never past max
    assert len(servicer.frames) == 3


async def test_one_unanswered_delivery_times_out_alone() -> None:
    servicer = Frames()
    async with served(servicer) as target, batching(target) as t:
        held, *others = await asyncio.gather(
            t.send(delivery(0, b"hold"), 0.3), *(t.send(delivery(n), 5) for n in range(1, 4))
        )
        assert held == Outcome(OutcomeKind.RETRY, "deadline of 0.3s exceeded", no_answer=True)
        assert {o.kind for o in others} == {OutcomeKind.ACK}
        # The stream was not torn down for it.
        assert (await t.send(delivery(9), 5)).kind is OutcomeKind.ACK
    assert servicer.frames[0] == 4


async def test_a_consumer_that_dies_with_a_frame_makes_each_delivery_a_suspect() -> None:
    async with served(Frames()) as target, batching(target) as t:
        outcomes = await asyncio.gather(t.send(delivery(1), 5), t.send(delivery(2, b"die"), 5))
        assert [(o.kind, o.lost) for o in outcomes] == [(OutcomeKind.BACKOFF, True)] * 2
        # The next send opens a new stream.
        assert (await t.send(delivery(3), 5)).kind is OutcomeKind.ACK


class StreamOnly(_Handler):
    """A consumer that knows only ``DeliverStream`` (gRPC itself answers UNIMPLEMENTED to the
    rest); counts the calls asked for, by method, and the deliveries it handled, by id."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.handled: Counter[str] = Counter()
        self._inner = grpc.method_handlers_generic_handler(
            "siding.v1.Consumer",
            {
                "DeliverStream": grpc.stream_stream_rpc_method_handler(
                    self.stream,
                    request_deserializer=consumer_pb2.Delivery.FromString,
                    response_serializer=consumer_pb2.Result.SerializeToString,
                )
            },
        )

    def service(
        self, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[consumer_pb2.Delivery, consumer_pb2.Result] | None:
        self.asked[details.method.rsplit("/", 1)[-1]] += 1
        return self._inner.service(details)

    async def stream(
        self, requests: AsyncIterator[consumer_pb2.Delivery], _context: Context
    ) -> AsyncIterator[consumer_pb2.Result]:
        async for d in requests:
            self.handled[d.id] += 1
            yield consumer_pb2.Result(delivery_id=d.id, verdict=consumer_pb2.VERDICT_ACK)


async def test_a_consumer_without_deliver_batches_gets_deliver_stream_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = StreamOnly()
    caplog.set_level(logging.WARNING, "siding.transport.grpc_batch")
    async with served(handler) as target, batching(target) as t:
        first = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(10)))
        again = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(10, 20)))
        assert not t.batching
        # a stream that broke later is opened again on DeliverStream: batching is not asked anew
        for stream in t._streams:
            stream.fail(RuntimeError("the consumer went away"))
        last = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(20, 30)))
    assert {o.kind for o in first + again + last} == {OutcomeKind.ACK}  # no attempt spent
    # DeliverBatches was asked once (twice when grpc.aio's stand-in status hid the consumer's
    # UNIMPLEMENTED and it was asked again: the test below); every delivery reached the
    # consumer exactly once
    assert handler.asked["DeliverBatches"] in {1, 2}
    assert handler.asked["DeliverStream"] == 2
    assert handler.handled == Counter(f"orders/0/{n}" for n in range(30))
    # siding's own lines only: grpc's asyncio poller may log a callback error under load
    lines = [r.getMessage() for r in caplog.records if r.name == "siding.transport.grpc_batch"]
    assert len(lines) == 1 and "does not implement DeliverBatches" in lines[0]


class StandInCall:
    """A DeliverBatches call as grpc.aio leaves it when a write meets a call the consumer has
    just ended: the write fails, and the status is the stand-in INTERNAL, the consumer's own
    lost. Nothing reaches the consumer."""

    def __init__(self) -> None:
        self.ended = asyncio.Event()

    def _error(self) -> grpc.aio.AioRpcError:
        return grpc.aio.AioRpcError(
            grpc.StatusCode.INTERNAL,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(),
            CORE_WRITE_ERROR,
            "write failed in gRPC's core",
        )

    def done(self) -> bool:
        return self.ended.is_set()

    async def write(self, _message: object) -> None:
        self.ended.set()
        raise self._error()

    async def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INTERNAL

    async def details(self) -> str:
        return CORE_WRITE_ERROR

    def cancel(self) -> bool:
        return False

    def __aiter__(self) -> StandInCall:
        return self

    async def __anext__(self) -> consumer_pb2.ResultBatch:
        await self.ended.wait()
        raise self._error()


@pytest.fixture
def stand_in_first(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first DeliverBatches stream of the test meets the stand-in; the consumer is asked for
    real after it. Yields the kinds of DeliverBatches calls made, in order."""
    made: list[str] = []
    real = consumer_pb2_grpc.ConsumerStub

    class Stub:
        def __init__(self, channel: grpc.aio.Channel) -> None:
            self._real = real(channel)

        def DeliverBatches(self, *args: Any, **kwargs: Any) -> object:
            if not made:
                made.append("stand-in")
                return StandInCall()
            made.append("asked" if "timeout" in kwargs else "stream")
            return self._real.DeliverBatches(*args, **kwargs)

        def __getattr__(self, name: str) -> object:
            return getattr(self._real, name)

    monkeypatch.setattr(consumer_pb2_grpc, "ConsumerStub", Stub)
    return made


async def test_a_stand_in_status_hiding_unimplemented_asks_the_consumer_and_falls_back(
    caplog: pytest.LogCaptureFixture, stand_in_first: list[str]
) -> None:
    # 1 run in 60 on a quiet machine: the consumer's UNIMPLEMENTED was overwritten by grpc.aio's
    # INTERNAL stand-in, the deliveries backed off as if the consumer were down, and
    # DeliverBatches was tried again.
    handler = StreamOnly()
    caplog.set_level(logging.WARNING, "siding.transport.grpc_batch")
    async with served(handler) as target, batching(target) as t:
        outcomes = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(10)))
        assert not t.batching
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}  # no attempt spent, none suspected
    assert stand_in_first == ["stand-in", "asked"]  # asked once, never streamed again
    assert handler.asked["DeliverStream"] == 1
    assert handler.handled == Counter(f"orders/0/{n}" for n in range(10))
    lines = [r.getMessage() for r in caplog.records if r.name == "siding.transport.grpc_batch"]
    assert len(lines) == 1 and "does not implement DeliverBatches" in lines[0]


async def test_a_stand_in_status_from_a_consumer_that_serves_batches_leaves_suspects(
    stand_in_first: list[str],
) -> None:
    # The consumer says it serves DeliverBatches: the stream ended for some other reason, and
    # what was handed to gRPC may be in its hands (a crash pill must count that death).
    async with served(Frames()) as target, batching(target) as t:
        outcomes = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(3)))
        assert [(o.kind, o.lost) for o in outcomes] == [(OutcomeKind.BACKOFF, True)] * 3
        assert t.batching
        assert (await t.send(delivery(3), 5)).kind is OutcomeKind.ACK
    assert stand_in_first == ["stand-in", "asked", "stream"]


async def test_a_second_transport_of_the_worker_does_not_ask_a_consumer_without_batches_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Two lanes of a worker each have a transport to one consumer, on gRPC's one connection.
    handler = StreamOnly()
    caplog.set_level(logging.WARNING, "siding.transport.grpc_batch")
    async with served(handler) as target, batching(target) as main, batching(target) as lane:
        first = await asyncio.gather(*(main.send(delivery(n), 5) for n in range(5)))
        then = await asyncio.gather(*(lane.send(delivery(n), 5) for n in range(5, 10)))
        assert not main.batching and not lane.batching
    assert {o.kind for o in first + then} == {OutcomeKind.ACK}
    assert handler.asked["DeliverBatches"] == 1
    assert handler.handled == Counter(f"orders/0/{n}" for n in range(10))
    lines = [r.getMessage() for r in caplog.records if r.name == "siding.transport.grpc_batch"]
    assert len(lines) == 1 and "does not implement DeliverBatches" in lines[0]


async def test_the_python_consumer_serves_batches_byte_for_byte() -> None:
    seen: dict[str, bytes | None] = {}

    async def handle(d: Delivery) -> Reply:
        seen[d.id] = d.value
        if d.key == b"dead":
            return dead("no")
        return retry(2.5, "later") if d.key == b"retry" else ack()

    values: list[bytes | None] = [ODD, b"", None, ODD[::-1], b"\x00"]
    keys = [b"ack", b"dead", b"retry", None, b"ack"]
    async with ConsumerServer(handle) as server, batching(server.target) as t:
        outcomes = await asyncio.gather(
            *(
                t.send(delivery(n, k, v), 5)
                for n, (k, v) in enumerate(zip(keys, values, strict=True))
            )
        )
    assert seen == {f"orders/0/{n}": v for n, v in enumerate(values)}
    assert [(o.kind, o.reason, o.retry_after_s) for o in outcomes] == [
        (OutcomeKind.ACK, "", None),
        (OutcomeKind.DEAD, "no", None),
        (OutcomeKind.RETRY, "later", 2.5),
        (OutcomeKind.ACK, "", None),
        (OutcomeKind.ACK, "", None),
    ]


async def test_frames_stay_within_their_bytes() -> None:
    servicer = Frames()
    limits = BatchLimits(max_items=100, linger_s=0.01, max_bytes=3000)
    async with served(servicer) as target, batching(target, limits) as t:
        sends = (t.send(delivery(n, value=b"x" * 1000), 5) for n in range(6))
        outcomes = await asyncio.gather(*sends)
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}
    assert servicer.frames == [2, 2, 2]


async def test_a_frame_too_large_for_the_consumer_is_split_and_only_a_big_record_dies() -> None:
    async def handle(_d: Delivery) -> Reply:
        return ack()

    # Given a consumer that keeps its receive limit at 3,000 bytes and a client allowed 1 MiB
    limit = (("grpc.max_receive_message_length", 3000),)
    limits = BatchLimits(max_items=100, linger_s=0.01, max_bytes=1 << 20)
    async with (
        ConsumerServer(handle, options=limit) as server,
        batching(server.target, limits) as t,
    ):
        # When six records of 1,000 bytes and one of 5,000 go out together
        small = [t.send(delivery(n, value=b"x" * 1000), 5) for n in range(6)]
        outcomes = await asyncio.gather(*small, t.send(delivery(9, value=b"y" * 5000), 5))
        assert t.limits.max_bytes == 3000  # learned from the refusal
    # Then the small ones were sent again in frames that fit, without spending an attempt
    assert [o.kind for o in outcomes[:6]] == [OutcomeKind.ACK] * 6
    # And only the big one is too large, alone
    assert outcomes[6].kind is OutcomeKind.DEAD
    assert outcomes[6].reason.startswith("message too large: ")


@pytest.mark.parametrize("kind", ["stream", "batch"])
async def test_a_consumer_that_dies_while_a_delivery_is_written_makes_it_a_suspect(
    kind: str,
) -> None:
    # Given a real consumer process with a stream open, that stops reading (SIGSTOP)
    big = 32 << 20  # more than the socket buffers and gRPC's windows hold: the write waits
    options = (("grpc.max_send_message_length", 2 * big),)
    consumer = SimConsumerProcess().start()
    spec = ChannelSpec(consumer.target, options=options)
    t = (
        GrpcStreamTransport(spec)
        if kind == "stream"
        else GrpcBatchTransport(spec, limits=BatchLimits(8, 0.0, 2 * big))
    )
    try:
        assert (await t.send(delivery(1), 5)).kind is OutcomeKind.ACK
        consumer.signal(signal.SIGSTOP)
        # When a large delivery is being written to it and the consumer dies meanwhile
        sending = asyncio.create_task(t.send(delivery(2, value=b"x" * big), 30))
        await asyncio.sleep(1.0)
        assert not sending.done()
        consumer.kill()
        outcome = await asyncio.wait_for(sending, 10)
    finally:
        consumer.stop()
        await t.close()
    # Then the delivery may have been in the consumer's hands: a suspect, as if it was answered
    # by the death (a consumer that read it and died at once breaks the stream as fast as
    # gRPC says the write is over: docs/dispatch.md, "Suspects")
    assert (outcome.kind, outcome.lost) == (OutcomeKind.BACKOFF, True), outcome
