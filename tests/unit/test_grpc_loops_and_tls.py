"""The transports across event loops (Spark workers reuse them batch after batch) and over TLS."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from siding.consumer import ConsumerServer, Reply, ack
from siding.devkit.sim_consumer import SimConsumer
from siding.model import Delivery, OutcomeKind
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport

Transport = GrpcUnaryTransport | GrpcStreamTransport


def delivery(n: int) -> Delivery:
    return Delivery(f"orders/0/{n}", "orders", 0, n, key=None, value=b"v")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimConsumer]:
    with SimConsumer() as consumer:
        yield consumer


@pytest.mark.parametrize("kind", [GrpcUnaryTransport, GrpcStreamTransport])
def test_one_transport_serves_batch_after_batch_each_in_its_own_loop(
    sim: SimConsumer, kind: type[Transport]
) -> None:
    # Given a transport built outside any event loop (as a Spark worker would keep it)
    client = kind(ChannelSpec(sim.target))

    async def batch(first: int, close: bool) -> set[OutcomeKind]:
        outcomes = await asyncio.gather(*(client.send(delivery(first + n), 5) for n in range(20)))
        if close:
            await client.close()
        return {o.kind for o in outcomes}

    # When batches run in successive loops, closing the transport in between or not
    results = [asyncio.run(batch(0, close=True)), asyncio.run(batch(20, close=False))]
    results.append(asyncio.run(batch(40, close=True)))

    # Then every batch is delivered
    assert results == [{OutcomeKind.ACK}] * 3


def _self_signed(folder: Path) -> tuple[str, str]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


async def _ack(_d: Delivery) -> Reply:
    return ack()


@pytest.mark.parametrize("kind", [GrpcUnaryTransport, GrpcStreamTransport])
async def test_tls_verifies_the_server_against_the_ca_file(
    tmp_path: Path, kind: type[Transport]
) -> None:
    cert, key = _self_signed(tmp_path)
    async with ConsumerServer(_ack, tls_cert_file=cert, tls_key_file=key) as server:
        trusted = kind(ChannelSpec(server.target, tls=True, ca_file=cert))
        untrusted = kind(
            ChannelSpec(server.target, tls=True)
        )  # system roots: our certificate is unknown
        plain = kind(ChannelSpec(server.target))
        try:
            assert (await trusted.send(delivery(1), 5)).kind is OutcomeKind.ACK
            assert await trusted.probe()
            assert (await untrusted.send(delivery(2), 5)).kind is OutcomeKind.BACKOFF
            assert (await plain.send(delivery(3), 5)).kind is OutcomeKind.BACKOFF
        finally:
            for client in (trusted, untrusted, plain):
                await client.close()
