"""Both gRPC transports against real grpc.aio servers on loopback: every mapping row, deadlines,
unreachable endpoints, bearer tokens, health probes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from siding.consumer import ConsumerServer, Reply, ack, dead, retry
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport
from siding.v1 import consumer_pb2, consumer_pb2_grpc

Transport = GrpcUnaryTransport | GrpcStreamTransport
T = TypeVar("T", bound=Transport)
TRANSPORTS = [GrpcUnaryTransport, GrpcStreamTransport]
Context = grpc.aio.ServicerContext[object, object]


def delivery(n: int, key: bytes | None = None, value: bytes | None = b"v") -> Delivery:
    return Delivery(f"orders/0/{n}", "orders", 0, n, key=key, value=value)


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Scripted(consumer_pb2_grpc.ConsumerServicer):
    """A hand-written consumer: the key says what to answer; remembers the metadata it saw."""

    def __init__(self) -> None:
        self.authorization: list[str] = []
        self.streams = 0

    def _remember(self, context: Context) -> None:
        metadata = dict(context.invocation_metadata() or ())
        self.authorization.append(str(metadata.get("authorization", "")))

    async def Deliver(
        self, request: consumer_pb2.Delivery, context: Context
    ) -> consumer_pb2.Result:
        self._remember(context)
        command = request.key.decode()
        if command.startswith("abort:"):
            await context.abort(grpc.StatusCode[command[6:]], "scripted")
        if command == "empty":
            return consumer_pb2.Result()
        verdicts = {"retry": consumer_pb2.VERDICT_RETRY, "dead": consumer_pb2.VERDICT_DEAD}
        result = consumer_pb2.Result(
            delivery_id=request.id,
            verdict=verdicts.get(command, consumer_pb2.VERDICT_ACK),
            reason=f"because {command}",
        )
        if command == "retry":
            result.retry_after_seconds = 7.5
        return result

    async def DeliverBatches(
        self, _requests: AsyncIterator[consumer_pb2.DeliveryBatch], context: Context
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        # A consumer written before batched delivery: it does not implement the call.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "batched delivery is not implemented")
        yield consumer_pb2.ResultBatch()

    async def DeliverStream(
        self, request_iterator: AsyncIterator[consumer_pb2.Delivery], context: Context
    ) -> AsyncIterator[consumer_pb2.Result]:
        # Reads a batch of four, then answers it in reverse order: odd offsets DEAD.
        self._remember(context)
        self.streams += 1
        batch: list[consumer_pb2.Delivery] = []
        async for request in request_iterator:
            if request.key == b"abort":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad stream")
            batch.append(request)
            if len(batch) == 4:
                for item in reversed(batch):
                    odd = item.offset % 2
                    verdict = consumer_pb2.VERDICT_DEAD if odd else consumer_pb2.VERDICT_ACK
                    yield consumer_pb2.Result(delivery_id=item.id, verdict=verdict)
                batch.clear()


@asynccontextmanager
async def scripted_server(servicer: Scripted, health: str | None = None) -> AsyncIterator[str]:
    """A raw grpc.aio server; ``health`` is the overall status it reports (None: no health)."""
    server = grpc.aio.server()
    consumer_pb2_grpc.add_ConsumerServicer_to_server(servicer, server)
    if health is not None:
        checker = health_aio.HealthServicer()
        await checker.set("", getattr(health_pb2.HealthCheckResponse, health))
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


@asynccontextmanager
async def transport(kind: type[T], target: str, **kwargs: Any) -> AsyncIterator[T]:
    client = kind(ChannelSpec(target, **kwargs))
    try:
        yield client
    finally:
        await client.close()


class Gate:
    """A handler for the SDK server: key b"hold" waits until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.arrived = asyncio.Event()
        self.calls: dict[str, int] = {}

    async def __call__(self, d: Delivery) -> Reply:
        self.calls[d.id] = self.calls.get(d.id, 0) + 1
        if d.key == b"hold":
            self.arrived.set()
            await self.opened.wait()
        return ack()


# --- every row of the gRPC mapping ------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "kind", "reason", "retry_after"),
    [
        ("ack", OutcomeKind.ACK, "", None),
        ("retry", OutcomeKind.RETRY, "because retry", 7.5),
        ("dead", OutcomeKind.DEAD, "because dead", None),
        ("empty", OutcomeKind.RETRY, "consumer answered without a verdict (0)", None),
    ],
)
async def test_unary_result_messages(
    command: str, kind: OutcomeKind, reason: str, retry_after: float | None
) -> None:
    async with scripted_server(Scripted()) as target, transport(GrpcUnaryTransport, target) as t:
        outcome = await t.send(delivery(1, key=command.encode()), 5)
    assert (outcome.kind, outcome.reason, outcome.retry_after_s) == (kind, reason, retry_after)


BARE_STATUS = {
    "ALREADY_EXISTS": OutcomeKind.ACK,
    "RESOURCE_EXHAUSTED": OutcomeKind.BACKOFF,
    "UNAVAILABLE": OutcomeKind.BACKOFF,
    "UNAUTHENTICATED": OutcomeKind.BACKOFF,
    "PERMISSION_DENIED": OutcomeKind.BACKOFF,
    "UNIMPLEMENTED": OutcomeKind.BACKOFF,
    "INVALID_ARGUMENT": OutcomeKind.DEAD,
    "FAILED_PRECONDITION": OutcomeKind.DEAD,
    "NOT_FOUND": OutcomeKind.DEAD,
    "OUT_OF_RANGE": OutcomeKind.DEAD,
    "DATA_LOSS": OutcomeKind.DEAD,
    "DEADLINE_EXCEEDED": OutcomeKind.RETRY,
    "UNKNOWN": OutcomeKind.RETRY,
    "INTERNAL": OutcomeKind.RETRY,
    "ABORTED": OutcomeKind.RETRY,
    "CANCELLED": OutcomeKind.BACKOFF,
}


def test_the_table_covers_every_status_code_but_ok() -> None:
    assert set(BARE_STATUS) == {c.name for c in grpc.StatusCode} - {"OK"}


@pytest.mark.parametrize(("code", "kind"), BARE_STATUS.items())
async def test_unary_bare_status(code: str, kind: OutcomeKind) -> None:
    async with scripted_server(Scripted()) as target, transport(GrpcUnaryTransport, target) as t:
        outcome = await t.send(delivery(1, key=f"abort:{code}".encode()), 5)
    assert outcome.kind is kind
    if kind is not OutcomeKind.ACK:
        assert outcome.reason == f"grpc {code}: scripted"


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_no_answer_within_the_deadline_is_a_retry(kind: type[Transport]) -> None:
    gate = Gate()
    async with ConsumerServer(gate) as server, transport(kind, server.target) as t:
        outcome = await t.send(delivery(1, key=b"hold"), 0.2)
        assert outcome.kind is OutcomeKind.RETRY
        assert outcome.reason == "deadline of 0.2s exceeded"
        # The endpoint is still fine afterwards (for a stream: the stream was not torn down).
        assert (await t.send(delivery(2), 5)).kind is OutcomeKind.ACK
        gate.opened.set()


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_connection_refused_is_backoff_never_dead(kind: type[Transport]) -> None:
    async with transport(kind, f"127.0.0.1:{closed_port()}") as t:
        outcomes = [await t.send(delivery(n), 5) for n in range(3)]
        healthy = await t.probe()
    assert {o.kind for o in outcomes} == {OutcomeKind.BACKOFF}
    assert not healthy


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_bearer_token_reaches_the_consumer(kind: type[Transport]) -> None:
    servicer = Scripted()
    async with scripted_server(servicer) as target, transport(kind, target, token="t0k") as t:
        sends = [t.send(delivery(n), 5) for n in range(4)]  # a full batch for the stream
        outcomes = await asyncio.gather(*sends)
    assert OutcomeKind.ACK in {o.kind for o in outcomes}
    assert servicer.authorization
    assert set(servicer.authorization) == {"Bearer t0k"}


# --- the stream --------------------------------------------------------------------------------


async def test_stream_matches_out_of_order_results_by_id_on_one_stream() -> None:
    servicer = Scripted()
    async with scripted_server(servicer) as target, transport(GrpcStreamTransport, target) as t:
        outcomes = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(12)))
        assert t.in_flight == 0
    kinds = [o.kind for o in outcomes]
    assert kinds == [OutcomeKind.DEAD if n % 2 else OutcomeKind.ACK for n in range(12)]
    assert servicer.streams == 1


async def test_a_slow_delivery_does_not_delay_later_ones() -> None:
    gate = Gate()
    async with ConsumerServer(gate) as server, transport(GrpcStreamTransport, server.target) as t:
        slow = asyncio.create_task(t.send(delivery(0, key=b"hold"), 30))
        await asyncio.wait_for(gate.arrived.wait(), 5)
        fast = await asyncio.gather(*(t.send(delivery(n), 5) for n in range(1, 51)))
        assert {o.kind for o in fast} == {OutcomeKind.ACK}
        assert not slow.done()
        gate.opened.set()
        assert (await slow).kind is OutcomeKind.ACK


async def test_a_broken_stream_gives_backoff_not_dead() -> None:
    async with scripted_server(Scripted()) as target, transport(GrpcStreamTransport, target) as t:
        outcomes = await asyncio.gather(
            t.send(delivery(1), 5), t.send(delivery(2), 5), t.send(delivery(3, key=b"abort"), 5)
        )
    assert {o.kind for o in outcomes} == {OutcomeKind.BACKOFF}
    assert "INVALID_ARGUMENT" in outcomes[0].reason


async def test_duplicate_ids_in_flight_share_one_delivery() -> None:
    gate = Gate()
    async with ConsumerServer(gate) as server, transport(GrpcStreamTransport, server.target) as t:
        first = asyncio.create_task(t.send(delivery(7, key=b"hold"), 10))
        await asyncio.wait_for(gate.arrived.wait(), 5)
        second = asyncio.create_task(t.send(delivery(7, key=b"hold"), 10))
        await asyncio.sleep(0)  # let the second join before the answer exists
        assert t.in_flight == 1
        gate.opened.set()
        assert [(await first).kind, (await second).kind] == [OutcomeKind.ACK, OutcomeKind.ACK]
    assert gate.calls["orders/0/7"] == 1


async def test_stream_survives_a_consumer_restart_on_the_same_port() -> None:
    gate = Gate()
    listen = f"127.0.0.1:{closed_port()}"
    server = ConsumerServer(gate, listen)
    await server.start()
    async with transport(GrpcStreamTransport, listen) as t:
        assert (await t.send(delivery(1), 5)).kind is OutcomeKind.ACK
        held = asyncio.create_task(t.send(delivery(2, key=b"hold"), 30))
        await asyncio.wait_for(gate.arrived.wait(), 5)

        await server.stop(0)  # the consumer goes away with a delivery in flight
        assert (await held).kind is OutcomeKind.BACKOFF
        assert (await t.send(delivery(3), 5)).kind is OutcomeKind.BACKOFF

        async with ConsumerServer(gate, listen):  # ...and comes back on the same port
            outcome = await _until_acked(t, delivery(4), timeout_s=15)
        assert outcome.kind is OutcomeKind.ACK


async def _until_acked(t: Transport, d: Delivery, timeout_s: float) -> Outcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        outcome = await t.send(d, 2)
        if outcome.kind is OutcomeKind.ACK or loop.time() > deadline:
            return outcome
        await asyncio.sleep(0.05)


# --- health -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_probe_uses_health_checking(kind: type[Transport]) -> None:
    for status, expected in (("SERVING", True), ("NOT_SERVING", False)):
        async with (
            scripted_server(Scripted(), health=status) as target,
            transport(kind, target) as t,
        ):
            assert await t.probe() is expected


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_probe_without_health_service_falls_back_to_connectivity(
    kind: type[Transport],
) -> None:
    async with scripted_server(Scripted(), health=None) as target, transport(kind, target) as t:
        assert await t.probe()


async def test_probe_of_the_sdk_server_follows_its_life() -> None:
    server = ConsumerServer(Gate())
    await server.start()
    async with transport(GrpcUnaryTransport, server.target, probe_timeout_s=0.5) as t:
        assert await t.probe()
        await server.stop(0)
        assert not await t.probe()


# --- results other than ack from the SDK ------------------------------------------------------


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_sdk_replies_map_to_outcomes(kind: type[Transport]) -> None:
    async def handle(d: Delivery) -> Reply:
        return {b"r": retry(after_s=3, reason="later"), b"d": dead("poison")}.get(
            d.key or b"", ack()
        )

    async with ConsumerServer(handle) as server, transport(kind, server.target) as t:
        r, d, a = await asyncio.gather(
            t.send(delivery(1, key=b"r"), 5),
            t.send(delivery(2, key=b"d"), 5),
            t.send(delivery(3), 5),
        )
    assert (r.kind, r.reason, r.retry_after_s) == (OutcomeKind.RETRY, "later", 3.0)
    assert (d.kind, d.reason) == (OutcomeKind.DEAD, "poison")
    assert a.kind is OutcomeKind.ACK


class LateFirstAnswer:
    """Answers the first copy of an id late with DEAD, every later copy at once with ACK."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, d: Delivery) -> Reply:
        seen = self.calls[d.id] = self.calls.get(d.id, 0) + 1
        if seen == 1:
            await asyncio.sleep(0.6)
            return dead("first copy")
        return ack()


async def test_a_late_answer_to_an_abandoned_copy_never_settles_the_next_attempt() -> None:
    # Given a first attempt that times out while the consumer still works on it
    handler = LateFirstAnswer()
    async with (
        ConsumerServer(handler) as server,
        transport(GrpcStreamTransport, server.target) as t,
    ):
        first = await t.send(delivery(1), 0.2)
        assert first.kind is OutcomeKind.RETRY and first.no_answer
        # When the next attempt is sent before the first copy's late answer arrives
        second = await t.send(delivery(1), 5)
    # Then it was really sent, and settled by its own answer, not the first copy's DEAD
    assert handler.calls["orders/0/1"] == 2
    assert second.kind is OutcomeKind.ACK
