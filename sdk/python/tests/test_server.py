"""The gRPC server over the wire: the three calls, back-off, concurrency, batches answered per
delivery, health and graceful stop. The client is the generated stub (no siding needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from siding_consumer import (
    ConsumerServer,
    DeadLetter,
    Delivery,
    Output,
    Reply,
    SidingError,
    ack,
    backoff,
    current_call,
    dead,
    retry,
)
from siding_consumer.v1 import consumer_pb2, consumer_pb2_grpc

ALL_BYTES = bytes(range(256))


def delivery(n: int, key: bytes | None = None, value: bytes | None = b"v") -> consumer_pb2.Delivery:
    message = consumer_pb2.Delivery(id=f"orders/0/{n}", topic="orders", offset=n, attempt=1)
    if key is not None:
        message.key = key
    if value is not None:
        message.value = value
    return message


async def by_key(d: Delivery) -> Reply:
    """Each key says what to answer."""
    match d.key:
        case b"retry":
            return retry(1.5, "later")
        case b"dead":
            return dead("poison")
        case b"raise-dead":
            raise DeadLetter("unparseable")
        case b"raise":
            raise RuntimeError("database is down")
        case b"backoff":
            return backoff(2, "overloaded")
        case b"echo":
            return ack([Output("echo", key=d.key, value=d.value, headers=d.headers)])
        case b"call":
            return dead(current_call())
    return ack()


@asynccontextmanager
async def running(handler: object = by_key, **kwargs: object) -> AsyncIterator[ConsumerServer]:
    async with ConsumerServer(handler, **kwargs) as server:  # type: ignore[arg-type]
        yield server


@asynccontextmanager
async def stub(server: ConsumerServer) -> AsyncIterator[Any]:
    """The generated client (Any: grpc's stubs type aio streaming calls poorly)."""
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield consumer_pb2_grpc.ConsumerStub(channel)


@pytest.mark.parametrize(
    ("key", "verdict", "reason", "after"),
    [
        (b"ack", consumer_pb2.VERDICT_ACK, "", None),
        (b"retry", consumer_pb2.VERDICT_RETRY, "later", 1.5),
        (b"dead", consumer_pb2.VERDICT_DEAD, "poison", None),
        (b"raise-dead", consumer_pb2.VERDICT_DEAD, "unparseable", None),
        (b"raise", consumer_pb2.VERDICT_RETRY, "database is down", None),
    ],
)
async def test_unary_answers(key: bytes, verdict: int, reason: str, after: float | None) -> None:
    async with running() as server, stub(server) as client:
        result = await client.Deliver(delivery(1, key), timeout=5)
    assert (result.delivery_id, result.verdict, result.reason) == ("orders/0/1", verdict, reason)
    got = result.retry_after_seconds if result.HasField("retry_after_seconds") else None
    assert got == after


async def test_unary_backoff_is_resource_exhausted() -> None:
    async with running() as server, stub(server) as client:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await client.Deliver(delivery(1, b"backoff"), timeout=5)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert raised.value.details() == "overloaded"


async def test_a_binary_value_and_outputs_travel_exactly() -> None:
    sent = delivery(7, b"echo", ALL_BYTES)
    sent.headers.append(consumer_pb2.Header(key="h", value=b"\x00\xff"))
    async with running() as server, stub(server) as client:
        result = await client.Deliver(sent, timeout=5)
    [out] = result.outputs
    assert (out.topic, out.key, out.value) == ("echo", b"echo", ALL_BYTES)
    assert [(h.key, h.value) for h in out.headers] == [("h", b"\x00\xff")]


async def test_a_stream_answers_each_delivery_concurrently_and_backoff_is_a_retry() -> None:
    # The handler waits until all ten are inside it at once: only concurrent handling finishes.
    inside = 0
    all_inside = asyncio.Event()

    async def handle(d: Delivery) -> Reply:
        nonlocal inside
        inside += 1
        if inside == 10:
            all_inside.set()
        await all_inside.wait()
        return await by_key(d)

    keys = [b"ack", b"dead", b"backoff", b"retry", b"raise", b"ack", b"ack", b"ack", b"ack", b"ack"]

    async def requests() -> AsyncIterator[consumer_pb2.Delivery]:
        for n, key in enumerate(keys):
            yield delivery(n, key)

    async with running(handle) as server, stub(server) as client:
        call = client.DeliverStream(requests(), timeout=10)
        results = {r.delivery_id: r async for r in call}
    assert len(results) == 10
    assert results["orders/0/1"].verdict == consumer_pb2.VERDICT_DEAD
    assert results["orders/0/2"].verdict == consumer_pb2.VERDICT_RETRY  # no status per item
    assert results["orders/0/2"].retry_after_seconds == 2
    assert results["orders/0/4"].reason == "database is down"


async def test_batches_are_answered_per_delivery_in_any_order() -> None:
    # Given a handler that holds offset 0 until offset 5 (in a later frame) has been answered
    answered_five = asyncio.Event()

    async def handle(d: Delivery) -> Reply:
        if d.offset == 0:
            await answered_five.wait()
        reply = await by_key(d)
        if d.offset == 5:
            answered_five.set()
        return reply

    frames = [
        consumer_pb2.DeliveryBatch(
            deliveries=[delivery(0), delivery(1, b"dead"), delivery(2, b"retry")]
        ),
        consumer_pb2.DeliveryBatch(
            deliveries=[delivery(3, None, None), delivery(4, b"raise"), delivery(5, b"echo")]
        ),
    ]

    async def requests() -> AsyncIterator[consumer_pb2.DeliveryBatch]:
        for frame in frames:
            yield frame

    async with running(handle) as server, stub(server) as client:
        got = [frame async for frame in client.DeliverBatches(requests(), timeout=10)]
    # Then every delivery has exactly one result, each its own, offset 0 after offset 5
    order = [r.delivery_id for frame in got for r in frame.results]
    assert sorted(order) == [f"orders/0/{n}" for n in range(6)]
    assert order.index("orders/0/0") > order.index("orders/0/5")
    results = {r.delivery_id: r for frame in got for r in frame.results}
    verdicts = {n: results[f"orders/0/{n}"].verdict for n in range(6)}
    assert verdicts == {
        0: consumer_pb2.VERDICT_ACK,
        1: consumer_pb2.VERDICT_DEAD,
        2: consumer_pb2.VERDICT_RETRY,
        3: consumer_pb2.VERDICT_ACK,
        4: consumer_pb2.VERDICT_RETRY,
        5: consumer_pb2.VERDICT_ACK,
    }
    assert results["orders/0/5"].outputs[0].value == b"v"


async def test_results_ready_together_leave_in_one_frame() -> None:
    release = asyncio.Event()

    async def handle(_d: Delivery) -> Reply:
        await release.wait()
        return ack()

    async with running(handle) as server, stub(server) as client:
        queue: asyncio.Queue[consumer_pb2.DeliveryBatch | None] = asyncio.Queue()
        await queue.put(consumer_pb2.DeliveryBatch(deliveries=[delivery(n) for n in range(64)]))

        async def requests() -> AsyncIterator[consumer_pb2.DeliveryBatch]:
            while (frame := await queue.get()) is not None:
                yield frame

        call = client.DeliverBatches(requests(), timeout=10)
        await asyncio.sleep(0.2)  # let all 64 reach the handler, then let them all go
        release.set()
        counts: list[int] = []
        while sum(counts) < 64:
            frame = await call.read()
            assert isinstance(frame, consumer_pb2.ResultBatch)
            counts.append(len(frame.results))
        await queue.put(None)
        assert await call.read() is grpc.aio.EOF  # type: ignore[attr-defined]
    assert sum(counts) == 64
    assert len(counts) < 64  # batched, not one frame per result


async def test_current_call_tells_how_a_delivery_arrived() -> None:
    async def one(message: object) -> AsyncIterator[object]:
        yield message

    async with running() as server, stub(server) as client:
        unary = await client.Deliver(delivery(1, b"call"), timeout=5)
        [stream] = [r async for r in client.DeliverStream(one(delivery(2, b"call")), timeout=5)]
        frame = consumer_pb2.DeliveryBatch(deliveries=[delivery(3, b"call")])
        [batch] = [b async for b in client.DeliverBatches(one(frame), timeout=5)]
    assert (unary.reason, stream.reason) == ("Deliver", "DeliverStream")
    assert batch.results[0].reason == "DeliverBatches"
    assert current_call() == ""


class Held:
    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, d: Delivery) -> Reply:
        if d.key == b"hold":
            self.arrived.set()
            await self.release.wait()
        return ack()


async def _health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        request = health_pb2.HealthCheckRequest(service="siding.v1.Consumer")
        try:
            response = await health_pb2_grpc.HealthStub(channel).Check(request, timeout=2)
        except grpc.aio.AioRpcError:
            return -1
        return int(response.status)


@pytest.mark.parametrize("call", ["DeliverStream", "DeliverBatches"])
async def test_stop_finishes_deliveries_in_flight_then_stops(call: str) -> None:
    handler = Held()
    server = ConsumerServer(handler, grace_s=10)
    await server.start()
    assert await _health(server.target) == health_pb2.HealthCheckResponse.SERVING
    async with stub(server) as client:
        frames: asyncio.Queue[object] = asyncio.Queue()
        if call == "DeliverStream":
            await frames.put(delivery(1, b"hold"))
        else:
            await frames.put(consumer_pb2.DeliveryBatch(deliveries=[delivery(1, b"hold")]))

        async def requests() -> AsyncIterator[object]:
            while (frame := await frames.get()) is not None:
                yield frame

        rpc = getattr(client, call)(requests(), timeout=20)
        await asyncio.wait_for(handler.arrived.wait(), 5)
        stopping = asyncio.create_task(server.stop())
        # While it drains it reports itself unhealthy, and the call stays open
        assert await _eventually(lambda: _health_is_not_serving(server.target))
        assert not stopping.done()
        handler.release.set()
        answers = [message async for message in rpc]
        await asyncio.wait_for(stopping, 5)
    ids = [
        r.delivery_id
        for m in answers
        for r in (m.results if isinstance(m, consumer_pb2.ResultBatch) else [m])
    ]
    assert ids == ["orders/0/1"]


async def _health_is_not_serving(target: str) -> bool:
    status: int = await _health(target)
    return status != int(health_pb2.HealthCheckResponse.SERVING)


async def _eventually(probe: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if await probe():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_busy_port_is_an_error_not_a_shared_port() -> None:
    async with running(Held()) as first:
        with pytest.raises(SidingError, match="cannot listen"):
            await ConsumerServer(Held(), first.target).start()
