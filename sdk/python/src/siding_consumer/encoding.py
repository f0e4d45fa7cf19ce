"""Webhook bodies siding compressed (``Content-Encoding: gzip``, a route's ``compression``):
decoded before the signature is checked, since siding signs the body before compressing it."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from siding_consumer.errors import SidingError

ENCODING_HEADER = "content-encoding"
# wbits for a gzip stream (header and trailer checked), not raw deflate or zlib.
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class BodyEncodingError(SidingError):
    """A request body that cannot be decoded; ``status`` is the HTTP answer it deserves (415:
    an encoding this SDK does not decode, 400: a broken gzip stream, 413: too large decoded)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def content_encoding(headers: Mapping[str, str]) -> str | None:
    """The request's ``Content-Encoding`` (names are case-insensitive), or ``None``."""
    return next((v for k, v in headers.items() if k.lower() == ENCODING_HEADER), None)


def decode_body(headers: Mapping[str, str], body: bytes, max_bytes: int) -> bytes:
    """The body as siding signed it: ``body`` gunzipped when ``Content-Encoding`` is ``gzip``
    (at most ``max_bytes`` once decoded: a small body must not inflate without bound), else
    ``body`` unchanged. Raises ``BodyEncodingError``."""
    encoding = content_encoding(headers)
    if encoding is None or encoding.strip().lower() in ("", "identity"):
        return body
    if encoding.strip().lower() != "gzip":
        raise BodyEncodingError(415, f"content-encoding {encoding!r} is not supported (gzip is)")
    inflater = zlib.decompressobj(_GZIP_WBITS)
    try:
        data = inflater.decompress(body, max_bytes + 1)
    except zlib.error as error:
        raise BodyEncodingError(400, f"the gzip body does not decode: {error}") from None
    if len(data) > max_bytes:
        raise BodyEncodingError(413, f"the body is larger than {max_bytes} bytes decoded")
    if not inflater.eof or inflater.unused_data:
        raise BodyEncodingError(400, "the gzip body is cut short or has bytes after its end")
    return data


def without_encoding(headers: list[tuple[bytes, bytes]], size: int) -> list[tuple[bytes, bytes]]:
    """ASGI headers for a body already decoded to ``size`` bytes: no ``content-encoding``, the
    new ``content-length``, so the app behind does not decode it again."""
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-encoding", b"content-length")]
    return [*kept, (b"content-length", str(size).encode())]
