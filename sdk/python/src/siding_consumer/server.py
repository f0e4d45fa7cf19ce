"""Serve a handler to siding over gRPC: ``Deliver``, ``DeliverStream``, ``DeliverBatches`` and
health checking, with a graceful stop (stop taking deliveries, finish those in flight within a
grace period)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from siding_consumer.errors import SidingError
from siding_consumer.registration import Join, Registration, advertised
from siding_consumer.reply import CALL, Handler, call_handler
from siding_consumer.v1 import consumer_pb2, consumer_pb2_grpc
from siding_consumer.wire import CONSUMER_SERVICE, delivery_from_proto, reply_to_proto

log = logging.getLogger(__name__)

ServerOption = tuple[str, int | str]

DEFAULT_SERVER_OPTIONS: tuple[ServerOption, ...] = (
    # Binding a port that another server holds must fail, not share it silently.
    ("grpc.so_reuseport", 0),
    # gRPC cancels calls beyond 1,000 not yet picked up; siding keeps more than that in flight.
    ("grpc.server.max_pending_requests", 50_000),
    ("grpc.server.max_pending_requests_hard_limit", 100_000),
    # siding's channels ping every minute to find dead connections under quiet streams.
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # As large as siding's channels send; gRPC's 4 MiB default would refuse big records.
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
)

In = TypeVar("In", consumer_pb2.Delivery, consumer_pb2.DeliveryBatch)
Answer = Callable[[consumer_pb2.Delivery], Awaitable[tuple[consumer_pb2.Result, bool]]]


def merge_options(
    defaults: Iterable[ServerOption], overrides: Iterable[ServerOption]
) -> list[ServerOption]:
    """Server options with ``overrides`` replacing defaults of the same name."""
    merged = dict(defaults)
    merged.update(overrides)
    return list(merged.items())


class _Session(Generic[In]):
    """One ``DeliverStream`` or ``DeliverBatches`` call: each delivery read is handled in its own
    task; results are queued in completion order. Ends when the client stops sending (or
    ``drain`` is called) and every delivery read so far has been answered."""

    def __init__(
        self,
        answer: Answer,
        requests: AsyncIterator[In],
        unpack: Callable[[In], Iterable[consumer_pb2.Delivery]],
    ) -> None:
        self._answer = answer
        self._requests: AsyncIterator[In] = requests
        self._unpack: Callable[[In], Iterable[consumer_pb2.Delivery]] = unpack
        self.results: asyncio.Queue[consumer_pb2.Result | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading = True
        self._ended = False
        self._reader = asyncio.create_task(self._read())

    async def one_by_one(self) -> AsyncIterator[consumer_pb2.Result]:
        while (result := await self.results.get()) is not None:
            yield result

    async def in_frames(self) -> AsyncIterator[consumer_pb2.ResultBatch]:
        """Every result ready at once goes out in one frame."""
        while (first := await self.results.get()) is not None:
            frame = [first]
            ended = False
            while not self.results.empty():
                more = self.results.get_nowait()
                if more is None:
                    ended = True
                    break
                frame.append(more)
            yield consumer_pb2.ResultBatch(results=frame)
            if ended:
                return

    def drain(self) -> None:
        """Read no more deliveries; finish the ones already read."""
        self._reader.cancel()

    def close(self) -> None:
        self._reader.cancel()
        for task in self._tasks:
            task.cancel()

    async def _read(self) -> None:
        try:
            async for message in self._requests:
                for delivery in self._unpack(message):
                    task = asyncio.create_task(self._run(delivery))
                    self._tasks.add(task)
        except grpc.aio.AioRpcError as error:
            log.debug("stream ended by the client: %s", error.code().name)
        finally:
            self._reading = False
            self._end_if_done()

    async def _run(self, message: consumer_pb2.Delivery) -> None:
        try:
            result, _ = await self._answer(message)
            self.results.put_nowait(result)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)
            self._end_if_done()

    def _end_if_done(self) -> None:
        if not self._reading and not self._tasks and not self._ended:
            self._ended = True
            self.results.put_nowait(None)


def _single(message: consumer_pb2.Delivery) -> Iterable[consumer_pb2.Delivery]:
    return (message,)


def _batch(message: consumer_pb2.DeliveryBatch) -> Iterable[consumer_pb2.Delivery]:
    return message.deliveries


class _ConsumerServicer(consumer_pb2_grpc.ConsumerServicer):
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._sessions: set[_Session[Any]] = set()
        self._draining = False

    async def answer(self, message: consumer_pb2.Delivery) -> tuple[consumer_pb2.Result, bool]:
        """The handler's answer as a ``Result``, and whether it asked to back off."""
        delivery = delivery_from_proto(message)
        reply = await call_handler(self._handler, delivery)
        return reply_to_proto(reply, delivery.id), reply.backoff

    async def Deliver(
        self,
        request: consumer_pb2.Delivery,
        context: grpc.aio.ServicerContext[object, object],
    ) -> consumer_pb2.Result:
        CALL.set("Deliver")
        result, backoff = await self.answer(request)
        if backoff:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, result.reason)
        return result

    async def DeliverStream(
        self,
        request_iterator: AsyncIterator[consumer_pb2.Delivery],
        context: grpc.aio.ServicerContext[object, object],  # noqa: ARG002
    ) -> AsyncIterator[consumer_pb2.Result]:
        CALL.set("DeliverStream")  # the session's tasks inherit it
        session = self._open(_Session(self.answer, request_iterator, _single))
        try:
            async for result in session.one_by_one():
                yield result
        finally:
            self._close(session)

    async def DeliverBatches(
        self,
        request_iterator: AsyncIterator[consumer_pb2.DeliveryBatch],
        context: grpc.aio.ServicerContext[object, object],  # noqa: ARG002
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        CALL.set("DeliverBatches")
        session = self._open(_Session(self.answer, request_iterator, _batch))
        try:
            async for frame in session.in_frames():
                yield frame
        finally:
            self._close(session)

    def _open(self, session: _Session[In]) -> _Session[In]:
        self._sessions.add(session)
        if self._draining:
            session.drain()
        return session

    def _close(self, session: _Session[Any]) -> None:
        self._sessions.discard(session)
        session.close()

    def drain(self) -> None:
        self._draining = True
        for session in self._sessions:
            session.drain()


class ConsumerServer:
    """A gRPC server for one handler; an async context manager (``async with``) or
    ``start()``/``stop()``. Health checking answers SERVING until ``stop`` begins.

    ``listen`` is ``host:port``; port 0 picks a free one (see ``port``/``target``). TLS is on
    when both ``tls_cert_file`` and ``tls_key_file`` (PEM) are given. With ``join``, the server
    joins that siding route once it listens and leaves it first thing on ``stop``.
    """

    def __init__(
        self,
        handler: Handler,
        listen: str = "127.0.0.1:0",
        *,
        grace_s: float = 10.0,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        options: tuple[ServerOption, ...] = (),
        join: Join | None = None,
    ) -> None:
        if (tls_cert_file is None) != (tls_key_file is None):
            raise SidingError("TLS needs both tls_cert_file and tls_key_file")
        self.listen = listen
        self.grace_s = grace_s
        self._handler = handler
        self._tls = (tls_cert_file, tls_key_file) if tls_cert_file and tls_key_file else None
        self._options = options
        self._server: grpc.aio.Server | None = None
        self._servicer: _ConsumerServicer | None = None
        self._health: Any = None  # grpc_health ships no type information
        self._port = 0
        self._join = join
        self.registration: Registration | None = None

    @property
    def port(self) -> int:
        if not self._port:
            raise SidingError("the consumer server is not started")
        return self._port

    @property
    def target(self) -> str:
        """Where a client on this machine reaches the server: ``host:port``."""
        host = self.listen.rpartition(":")[0]
        if host in ("", "0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            raise SidingError("the consumer server is already started")
        server = grpc.aio.server(options=merge_options(DEFAULT_SERVER_OPTIONS, self._options))
        self._servicer = _ConsumerServicer(self._handler)
        consumer_pb2_grpc.add_ConsumerServicer_to_server(self._servicer, server)
        self._health = health_aio.HealthServicer()
        await self._health.set(CONSUMER_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        try:
            self._port = self._bind(server)
        except RuntimeError as exc:
            raise SidingError(f"cannot listen on {self.listen}: {exc}") from exc
        await server.start()
        self._server = server
        if self._join is not None:
            try:
                await self._register(self._join)
            except BaseException:
                await self.stop(0)
                raise

    async def _register(self, join: Join) -> None:
        self.registration = Registration(
            join.control_url,
            join.route,
            join.token,
            join.address or advertised(self.listen, self._port),
            transport="grpcs" if self._tls else "grpc",
            capacity=join.capacity,
            on_event=join.on_event,
        )
        await asyncio.to_thread(self.registration.start)

    def _bind(self, server: grpc.aio.Server) -> int:
        if self._tls is None:
            return server.add_insecure_port(self.listen)
        cert, key = (Path(p).read_bytes() for p in self._tls)
        credentials = grpc.ssl_server_credentials([(key, cert)])
        return server.add_secure_port(self.listen, credentials)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop taking deliveries; give those in flight ``grace_s`` to finish, then cancel."""
        server, self._server = self._server, None
        if server is None:
            return
        assert self._servicer is not None
        if self.registration is not None:  # leave first: siding sends nothing new after
            await asyncio.to_thread(self.registration.stop)
        await self._health.enter_graceful_shutdown()
        self._servicer.drain()
        await server.stop(self.grace_s if grace_s is None else grace_s)

    async def wait(self) -> None:
        """Until the server has stopped."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> ConsumerServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def until_signalled(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> int:
    """Wait for one of ``signals`` (SIGTERM, Ctrl-C) and return it."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not received.done():
            received.set_result(signum)

    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await received
    finally:
        for signum in signals:
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(signum)


def serve(
    handler: Handler,
    listen: str = "0.0.0.0:50051",
    *,
    grace_s: float = 10.0,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    join: Join | None = None,
) -> None:
    """Serve ``handler`` until SIGTERM or Ctrl-C, then stop gracefully. Blocks. With ``join``,
    the service joins that siding route while it runs (``Join``)."""

    async def main() -> None:
        server = ConsumerServer(
            handler,
            listen,
            grace_s=grace_s,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            join=join,
        )
        async with server:
            log.info("siding consumer listening on %s", server.target)
            await until_signalled()
            log.info("stopping: finishing deliveries in flight (up to %gs)", grace_s)

    asyncio.run(main())
