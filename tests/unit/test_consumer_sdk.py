"""The consumer SDK as siding re-exports it, against siding's own gRPC transports: exceptions
over the wire, concurrency, graceful stop, a busy port, SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest

from siding.consumer import ConsumerServer, DeadLetter, Reply, ack, dead, retry
from siding.consumer.reply import reply_for_exception
from siding.errors import SidingError
from siding.model import Delivery, OutcomeKind, Verdict
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport

Transport = GrpcUnaryTransport | GrpcStreamTransport
TRANSPORTS = [GrpcUnaryTransport, GrpcStreamTransport]


def delivery(n: int, key: bytes | None = None) -> Delivery:
    return Delivery(f"orders/0/{n}", "orders", 0, n, key=key, value=b"v")


# --- the re-exports (the replies themselves are tested in sdk/python/tests) ---------------------


def test_siding_consumer_is_the_thin_sdk() -> None:
    import siding_consumer

    assert ConsumerServer is siding_consumer.ConsumerServer
    assert (ack, dead, retry, DeadLetter) == (
        siding_consumer.ack,
        siding_consumer.dead,
        siding_consumer.retry,
        siding_consumer.DeadLetter,
    )
    assert reply_for_exception(DeadLetter("x")) == Reply(Verdict.DEAD, None, "x")


# --- over the wire ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_handler_exceptions_over_the_wire(kind: type[Transport]) -> None:
    seen: list[Delivery] = []

    async def handle(d: Delivery) -> Reply:
        seen.append(d)
        if d.key == b"dead":
            raise DeadLetter("unparseable")
        if d.key == b"boom":
            raise RuntimeError("database is down")
        if d.key == b"none":
            return None  # type: ignore[return-value]
        return ack()

    sent = Delivery(
        "orders/3/9", "orders", 3, 9, key=None, value=None, headers=(("h", b"\x00\xff"),),
        timestamp_ms=1_700_000_000_123, attempt=4, lane=2,
    )  # fmt: skip
    async with ConsumerServer(handle) as server:
        client = kind(ChannelSpec(server.target))
        try:
            outcomes = await asyncio.gather(
                client.send(delivery(1, b"dead"), 5),
                client.send(delivery(2, b"boom"), 5),
                client.send(delivery(3, b"none"), 5),
                client.send(sent, 5),
            )
        finally:
            await client.close()
    kinds = [(o.kind, o.reason) for o in outcomes]
    assert kinds[:2] == [
        (OutcomeKind.DEAD, "unparseable"),
        (OutcomeKind.RETRY, "database is down"),
    ]
    assert kinds[2][0] is OutcomeKind.RETRY
    assert kinds[3] == (OutcomeKind.ACK, "")
    assert sent in seen  # the handler got exactly what was sent: null key, tombstone, headers


async def test_a_stream_handles_its_deliveries_concurrently() -> None:
    # The handler waits until all ten are inside it at once: only concurrent handling finishes.
    inside = 0
    all_inside = asyncio.Event()

    async def handle(_d: Delivery) -> Reply:
        nonlocal inside
        inside += 1
        if inside == 10:
            all_inside.set()
        await all_inside.wait()
        return ack()

    async with ConsumerServer(handle) as server:
        client = GrpcStreamTransport(ChannelSpec(server.target))
        try:
            outcomes = await asyncio.gather(*(client.send(delivery(n), 5) for n in range(10)))
        finally:
            await client.close()
    assert {o.kind for o in outcomes} == {OutcomeKind.ACK}


class Held:
    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, d: Delivery) -> Reply:
        if d.key == b"hold":
            self.arrived.set()
            await self.release.wait()
        return ack()


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_stop_finishes_deliveries_in_flight_and_takes_no_new_ones(
    kind: type[Transport],
) -> None:
    handler = Held()
    server = ConsumerServer(handler, grace_s=10)
    await server.start()
    client, other = kind(ChannelSpec(server.target)), GrpcUnaryTransport(ChannelSpec(server.target))
    try:
        in_flight = asyncio.create_task(client.send(delivery(1, b"hold"), 20))
        await asyncio.wait_for(handler.arrived.wait(), 5)
        stopping = asyncio.create_task(server.stop())
        # While it drains, it reports itself unhealthy and refuses new deliveries.
        assert await _eventually_false(other.probe)
        assert (await other.send(delivery(2), 5)).kind is OutcomeKind.BACKOFF
        assert not in_flight.done()
        handler.release.set()
        assert (await in_flight).kind is OutcomeKind.ACK
        await asyncio.wait_for(stopping, 5)
    finally:
        await client.close()
        await other.close()


async def test_stop_cancels_what_outlives_the_grace_period() -> None:
    handler = Held()
    server = ConsumerServer(handler)
    await server.start()
    client = GrpcStreamTransport(ChannelSpec(server.target))
    try:
        in_flight = asyncio.create_task(client.send(delivery(1, b"hold"), 30))
        await asyncio.wait_for(handler.arrived.wait(), 5)
        await asyncio.wait_for(server.stop(grace_s=0.2), 5)
        assert (await asyncio.wait_for(in_flight, 5)).kind is OutcomeKind.BACKOFF
    finally:
        await client.close()


async def _eventually_false(probe: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if not await probe():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_busy_port_is_an_error_not_a_shared_port() -> None:
    async with ConsumerServer(Held()) as first:
        with pytest.raises(SidingError, match="cannot listen"):
            await ConsumerServer(Held(), first.target).start()


_SERVE = """
import sys
from siding.consumer import ack, serve

async def handle(d):
    return ack()

serve(handle, listen=sys.argv[1], grace_s=2)
"""


async def test_serve_blocks_until_sigterm_then_exits_cleanly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{sock.getsockname()[1]}"
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, listen])
    client = GrpcUnaryTransport(ChannelSpec(listen))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while (outcome := await client.send(delivery(1), 2)).kind is not OutcomeKind.ACK:
            assert loop.time() < deadline, f"serve() never answered: {outcome}"
            assert proc.poll() is None, "serve() exited early"
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 15) == 0
    finally:
        await client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
