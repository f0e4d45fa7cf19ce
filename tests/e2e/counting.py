"""A gRPC consumer written from the proto that counts its own open calls (received, not yet
answered), samples that count every 10 ms, and answers as a ``Behave`` function says."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import grpc
import grpc.aio

from siding.v1 import consumer_pb2, consumer_pb2_grpc

Context = grpc.aio.ServicerContext[object, object]
# (the delivery, the calls open with it) -> (seconds to take, answer RETRY instead of ACK)
Behave = Callable[[consumer_pb2.Delivery, int], tuple[float, bool]]
SAMPLE_S = 0.01


@dataclass
class Counting(consumer_pb2_grpc.ConsumerServicer):
    behave: Behave
    open: int = 0
    peak: int = 0
    starts: list[float] = field(default_factory=list)
    # (monotonic time, calls open) every SAMPLE_S
    samples: list[tuple[float, int]] = field(default_factory=list)
    asked: Counter[tuple[str, int]] = field(default_factory=Counter)
    acked: set[str] = field(default_factory=set)

    async def answer(self, d: consumer_pb2.Delivery) -> consumer_pb2.Result:
        self.open += 1
        self.peak = max(self.peak, self.open)
        self.starts.append(time.monotonic())
        self.asked[(d.id, d.attempt)] += 1
        try:
            seconds, retry = self.behave(d, self.open)
            await asyncio.sleep(seconds)
            if retry:
                return consumer_pb2.Result(delivery_id=d.id, verdict=consumer_pb2.VERDICT_RETRY)
            self.acked.add(d.id)
            return consumer_pb2.Result(delivery_id=d.id, verdict=consumer_pb2.VERDICT_ACK)
        finally:
            self.open -= 1

    async def Deliver(
        self,
        request: consumer_pb2.Delivery,
        context: Context,  # noqa: ARG002
    ) -> consumer_pb2.Result:
        return await self.answer(request)

    async def DeliverStream(
        self,
        request_iterator: AsyncIterator[consumer_pb2.Delivery],
        context: Context,  # noqa: ARG002
    ) -> AsyncIterator[consumer_pb2.Result]:
        results: asyncio.Queue[consumer_pb2.Result | None] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()

        async def one(d: consumer_pb2.Delivery) -> None:
            await results.put(await self.answer(d))

        async def read() -> None:
            async for d in request_iterator:
                task = asyncio.create_task(one(d))
                pending.add(task)
                task.add_done_callback(pending.discard)
            while pending:
                await asyncio.gather(*list(pending))
            await results.put(None)

        reader = asyncio.create_task(read())
        try:
            while (result := await results.get()) is not None:
                yield result
        finally:
            reader.cancel()
            for task in pending:
                task.cancel()

    async def DeliverBatches(
        self,
        request_iterator: AsyncIterator[consumer_pb2.DeliveryBatch],  # noqa: ARG002
        context: Context,
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no batches here")
        yield consumer_pb2.ResultBatch()

    async def sample(self) -> None:
        while True:
            self.samples.append((time.monotonic(), self.open))
            await asyncio.sleep(SAMPLE_S)


@dataclass(frozen=True)
class Seen:
    """What the consumer saw, as of when it was asked."""

    peak: int
    starts: list[float]
    samples: list[tuple[float, int]]
    asked: Counter[tuple[str, int]]
    acked: set[str]


def _serve(behave: Behave, conn: Connection) -> None:
    """In the consumer's own process: serve, and answer the test's questions on ``conn``."""

    async def main() -> None:
        consumer = Counting(behave)
        server = grpc.aio.server()
        consumer_pb2_grpc.add_ConsumerServicer_to_server(consumer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        sampler = asyncio.create_task(consumer.sample())
        conn.send(port)
        loop = asyncio.get_running_loop()
        while (question := await loop.run_in_executor(None, conn.recv)) != "stop":
            if question == "acked":
                conn.send(set(consumer.acked))
            else:
                c = consumer
                conn.send(Seen(c.peak, c.starts, c.samples, c.asked, set(c.acked)))
        sampler.cancel()
        await server.stop(0)

    asyncio.run(main())


class RemoteConsumer:
    """The counting consumer in a process of its own: the test's process is also Spark's driver,
    and a consumer sharing its interpreter would read its calls in bursts (the GIL), which is
    not what siding sent."""

    def __init__(self, behave: Behave) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(behave, child), daemon=True)
        self._process.start()
        if not self._conn.poll(60):
            raise RuntimeError("the counting consumer did not start")
        self.endpoint = f"grpc://127.0.0.1:{self._conn.recv()}"

    def acked(self) -> set[str]:
        self._conn.send("acked")
        acked: set[str] = self._conn.recv()
        return acked

    def seen(self) -> Seen:
        self._conn.send("all")
        seen: Seen = self._conn.recv()
        return seen

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


@contextmanager
def counting_consumer(behave: Behave) -> Iterator[RemoteConsumer]:
    """``with counting_consumer(behave) as consumer:`` (a module-level ``behave``)."""
    consumer = RemoteConsumer(behave)
    try:
        yield consumer
    finally:
        consumer.stop()
