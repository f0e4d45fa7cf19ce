"""HTTPS: a self-signed endpoint is refused by default and trusted only through ``ca_file``."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from siding.model import Delivery, OutcomeKind
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.tls import ClientTls

DELIVERY = Delivery(id="t/0/1", topic="t", partition=0, offset=1, key=None, value=b"v")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh self-signed certificate for 127.0.0.1 (openssl CLI)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def _serve(context: ssl.SSLContext) -> AsyncIterator[str]:
    async def hook(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app)
    await server.start_server(ssl=context)
    try:
        yield str(server.make_url("/hook"))
    finally:
        await server.close()


def _server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


@pytest.fixture
async def https_url(certificate: tuple[Path, Path]) -> AsyncIterator[str]:
    async for url in _serve(_server_context(certificate)):
        yield url


async def test_a_self_signed_certificate_is_refused_by_default(https_url: str) -> None:
    sender = HttpTransport(WebhookSpec(https_url))
    try:
        outcome = await sender.send(DELIVERY, 5.0)
        up = await sender.probe()
    finally:
        await sender.close()

    assert outcome.kind is OutcomeKind.BACKOFF
    assert "certificate" in outcome.reason.lower()
    assert up is False


async def test_a_self_signed_certificate_is_trusted_through_ca_file(
    https_url: str, certificate: tuple[Path, Path]
) -> None:
    sender = HttpTransport(WebhookSpec(https_url, ca_file=str(certificate[0])))
    try:
        outcome = await sender.send(DELIVERY, 5.0)
        up = await sender.probe()
    finally:
        await sender.close()

    assert outcome.kind is OutcomeKind.ACK
    assert up is True


async def test_verification_is_off_only_when_asked_for(https_url: str) -> None:
    sender = HttpTransport(WebhookSpec(https_url, insecure=True))
    try:
        outcome = await sender.send(DELIVERY, 5.0)
    finally:
        await sender.close()

    assert outcome.kind is OutcomeKind.ACK


async def test_an_inline_ca_from_the_config_is_trusted(
    https_url: str, certificate: tuple[Path, Path]
) -> None:
    sender = HttpTransport(
        WebhookSpec(https_url, client_tls=ClientTls(ca_pem=certificate[0].read_bytes()))
    )
    try:
        outcome = await sender.send(DELIVERY, 5.0)
    finally:
        await sender.close()

    assert outcome.kind is OutcomeKind.ACK


@pytest.fixture
async def mutual_tls_url(certificate: tuple[Path, Path]) -> AsyncIterator[str]:
    """An endpoint that only talks to clients presenting a certificate it trusts."""
    context = _server_context(certificate)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(certificate[0])
    async for url in _serve(context):
        yield url


@pytest.mark.parametrize("with_client_cert", [False, True])
async def test_mutual_tls_needs_the_client_certificate(
    mutual_tls_url: str, certificate: tuple[Path, Path], with_client_cert: bool
) -> None:
    cert, key = (p.read_bytes() for p in certificate)
    material = ClientTls(cert, cert, key) if with_client_cert else ClientTls(ca_pem=cert)
    sender = HttpTransport(WebhookSpec(mutual_tls_url, client_tls=material))
    try:
        outcome = await sender.send(DELIVERY, 5.0)
    finally:
        await sender.close()

    expected = OutcomeKind.ACK if with_client_cert else OutcomeKind.BACKOFF
    assert outcome.kind is expected, outcome.reason
