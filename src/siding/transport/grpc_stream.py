"""gRPC stream transport: many deliveries in flight on one long-lived ``DeliverStream``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import grpc
import grpc.aio

from siding.errors import TransportError
from siding.model import Delivery, Outcome
from siding.transport.grpc_common import (
    ChannelOption,
    ChannelSpec,
    LoopChannel,
    call_metadata,
    delivery_to_proto,
    probe_channel,
    result_from_proto,
)
from siding.transport.outcomes import (
    outcome_from_connection_error,
    outcome_from_grpc,
    outcome_from_timeout,
)
from siding.transport.tls import ClientTls
from siding.v1 import consumer_pb2, consumer_pb2_grpc

log = logging.getLogger(__name__)

StreamCall = grpc.aio.StreamStreamCall[consumer_pb2.Delivery, consumer_pb2.Result]


@dataclass(eq=False, slots=True)
class _Pending:
    """One delivery id on the wire; every ``send`` waiting for its answer has a future here."""

    waiters: list[asyncio.Future[Outcome]] = field(default_factory=list)

    def resolve(self, outcome: Outcome) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(outcome)


class _Stream:
    """One open ``DeliverStream`` call: a writer task drains the outbox onto the wire, a reader
    task matches results to pending deliveries by id. Once broken it stays broken."""

    def __init__(self, call: StreamCall, channel: grpc.aio.Channel) -> None:
        self.call = call
        self.channel = channel
        self.pending: dict[str, _Pending] = {}
        self.broken = False
        self._outbox: asyncio.Queue[tuple[_Pending, str, consumer_pb2.Delivery]] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write_loop(), name="siding-grpc-stream-writer")
        self._reader = asyncio.create_task(self._read_loop(), name="siding-grpc-stream-reader")

    def submit(self, delivery: Delivery) -> _Pending:
        entry = self.pending.get(delivery.id)
        if entry is None:
            entry = self.pending[delivery.id] = _Pending()
            self._outbox.put_nowait((entry, delivery.id, delivery_to_proto(delivery)))
        return entry

    def forget(self, delivery_id: str, entry: _Pending) -> None:
        """Every sender of ``entry`` gave up: a late answer for it is dropped."""
        if not entry.waiters and self.pending.get(delivery_id) is entry:
            del self.pending[delivery_id]

    async def _write_loop(self) -> None:
        try:
            while True:
                entry, delivery_id, message = await self._outbox.get()
                if self.pending.get(delivery_id) is not entry:
                    continue  # its senders gave up before it reached the wire
                await self.call.write(message)
        except Exception as error:  # whatever stops the stream must fail it, never hang it
            self.fail(error)

    async def _read_loop(self) -> None:
        try:
            async for message in self.call:
                entry = self.pending.pop(message.delivery_id, None)
                if entry is None:
                    continue  # an answer nobody waits for any more (its deadline passed)
                result = result_from_proto(message)
                entry.resolve(outcome_from_grpc(grpc.StatusCode.OK, result=result))
        except Exception as error:
            self.fail(error)
            return
        self.fail(TransportError("the consumer closed the stream"))

    def fail(self, error: BaseException) -> None:
        """The stream is over: every delivery still waiting gets a BACKOFF outcome."""
        if self.broken:
            return
        self.broken = True
        cause = _describe(error)
        log.info("gRPC stream to the consumer ended: %s", cause)
        outcome = outcome_from_connection_error(cause)
        for entry in self.pending.values():
            entry.resolve(outcome)
        self.pending.clear()
        self.call.cancel()
        current = asyncio.current_task()
        for task in (self._writer, self._reader):
            if task is not current:
                task.cancel()

    async def aclose(self) -> None:
        self.fail(TransportError("transport closed"))
        for task in (self._writer, self._reader):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _describe(error: BaseException) -> BaseException:
    if isinstance(error, grpc.aio.AioRpcError):
        details = error.details()
        text = f"stream broke: grpc {error.code().name}" + (f": {details}" if details else "")
        return TransportError(text)
    return error


class GrpcStreamTransport:
    """Sends deliveries over ONE long-lived ``DeliverStream`` per transport (per event loop).

    State machine: NO STREAM --send--> OPEN --breaks--> BROKEN --next send--> OPEN (a new call).
    While OPEN, any number of deliveries are in flight; results are matched by delivery id and
    may arrive in any order. Each ``send`` enforces its own deadline client-side (RETRY outcome).
    When the stream breaks (consumer down, restarted, closed the stream), every delivery still
    waiting gets a BACKOFF outcome; the next ``send`` opens a new stream.

    Duplicate ids: a ``send`` whose delivery id is already in flight on the stream is not written
    again; it waits (with its own deadline) for the answer to the one on the wire, since results
    carry only the id and could not tell two copies apart.

    Constructing it does no I/O and needs no event loop. A Spark worker that runs each batch in a
    new loop should ``close()`` it before that loop ends; the next ``send`` then starts afresh.
    """

    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        ca_file: str | None = None,
        client_tls: ClientTls | None = None,
        token: str | None = None,
        options: tuple[ChannelOption, ...] = (),
        probe_timeout_s: float = 2.0,
    ) -> None:
        self._channel = LoopChannel(ChannelSpec(target, tls, ca_file, options, client_tls))
        self._metadata = call_metadata(token)
        self._probe_timeout_s = probe_timeout_s
        self._stream: _Stream | None = None

    @property
    def target(self) -> str:
        return self._channel.spec.target

    @property
    def in_flight(self) -> int:
        """Distinct delivery ids waiting for an answer on the current stream."""
        stream = self._stream
        return 0 if stream is None or stream.broken else len(stream.pending)

    def _current_stream(self) -> _Stream:
        channel = self._channel.get()
        stream = self._stream
        if stream is None or stream.broken or stream.channel is not channel:
            stub = consumer_pb2_grpc.ConsumerStub(channel)
            stream = self._stream = _Stream(
                stub.DeliverStream(None, metadata=self._metadata), channel
            )
        return stream

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        stream = self._current_stream()
        entry = stream.submit(delivery)
        waiter: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        entry.waiters.append(waiter)
        try:
            async with asyncio.timeout(deadline_s):
                return await waiter
        except TimeoutError:
            return outcome_from_timeout(deadline_s)
        finally:
            entry.waiters.remove(waiter)
            stream.forget(delivery.id, entry)

    async def probe(self) -> bool:
        return await probe_channel(self._channel.get(), self._metadata, self._probe_timeout_s)

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and self._channel.is_current(stream.channel):
            await stream.aclose()
        await self._channel.close()
