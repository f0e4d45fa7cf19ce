"""Compression on the wire (docs/configuration.md, ``compression`` and ``compress_above``): what
to compress and how it is marked; pure, apart from gzip itself."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Codec = Literal["none", "gzip"]
DEFAULT_COMPRESS_ABOVE = 1024
# Fast, and most of the gain on JSON: the sender pays this per message, the consumer decodes.
GZIP_LEVEL = 1
CONTENT_ENCODING = "content-encoding"


@dataclass(frozen=True, slots=True)
class Compression:
    """A route's choice: ``codec`` for bodies (HTTP) and calls (gRPC unary) of at least
    ``above`` bytes; a gRPC stream is compressed whole (each message of it)."""

    codec: Codec = "none"
    above: int = DEFAULT_COMPRESS_ABOVE

    @property
    def on(self) -> bool:
        return self.codec != "none"


OFF = Compression()


def compresses(choice: Compression, size: int) -> bool:
    """Whether a body or message of ``size`` bytes goes compressed."""
    return choice.on and size >= choice.above


def already_encoded(headers: Sequence[tuple[str, bytes]]) -> bool:
    """Whether a record's Kafka headers say its value is encoded already (a ``content-encoding``
    header, forwarded as it is): such a value is never compressed again."""
    return any(name.lower() == CONTENT_ENCODING for name, _ in headers)


@dataclass(frozen=True, slots=True)
class HttpBody:
    """What a webhook request carries: the body as sent and the headers that say so. The
    signature is made over the body before it was compressed (docs/webhooks.md)."""

    data: bytes
    headers: tuple[tuple[str, str], ...]


def http_body(
    choice: Compression, body: bytes, kafka_headers: Sequence[tuple[str, bytes]] = ()
) -> HttpBody:
    """The request body for ``body`` under ``choice``: gzip with ``content-encoding: gzip`` when
    it is large enough and its record's ``kafka_headers`` do not say it is encoded already;
    otherwise as it is (the default path: no copy, no header)."""
    if not compresses(choice, len(body)) or already_encoded(kafka_headers):
        return HttpBody(body, ())
    return HttpBody(gzip_bytes(body), ((CONTENT_ENCODING, "gzip"),))


def refused_encoding(status: int, sent: HttpBody) -> bool:
    """Whether an answer ``status`` to ``sent`` refuses its compression (415 to a gzipped
    body, RFC 7694): the body goes again uncompressed, and so does everything after it."""
    return status == 415 and bool(sent.headers)


def gzip_bytes(body: bytes) -> bytes:
    # mtime=0: the same body gives the same bytes (no clock in the output).
    return gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
