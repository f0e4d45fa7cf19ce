"""HTTP webhook transport: POST each delivery to one endpoint and map the answer to an outcome.

The request is CloudEvents HTTP binary mode (the raw value is the body, metadata in ``ce-*``
headers) signed per Standard Webhooks; docs/webhooks.md lists every header.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import aiohttp
from yarl import URL

from siding.config.http_grammar import CONTROL
from siding.config.http_request import METHODS, refusal
from siding.config.url_template import parse_url_template
from siding.errors import ConfigError
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport import signing
from siding.transport.compression import (
    OFF,
    Compression,
    http_body,
    refused_encoding,
)
from siding.transport.http_headers import (
    DEFAULT_EVENT_TYPE,
    DEFAULT_SOURCE,
    bearer,
    build_headers,
)
from siding.transport.outcomes import (
    outcome_from_connection_error,
    outcome_from_http,
    outcome_from_lost_connection,
    outcome_from_timeout,
)
from siding.transport.outputs import MAX_OUTPUTS_BYTES, ack_from_body, is_json
from siding.transport.tls import ClientTls

log = logging.getLogger(__name__)

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
_REASON_EXCERPT_CHARS = 200
_USER_AGENT = "siding"


@dataclass(frozen=True, slots=True)
class WebhookSpec:
    """How to reach, sign for and talk to one webhook endpoint, for either HTTP transport (the
    transport checks it when it is built). HTTPS is verified against the system trust store, or
    only ``ca_file`` when given, unless ``insecure``; ``source`` may contain ``{topic}``. ``url``
    may be a template (siding.config.url_template); ``method``, ``headers`` (static, never
    shown) and ``idempotency_key`` shape each request (docs/webhooks.md)."""

    url: str = field(repr=False)  # may carry a user and password
    secret: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    source: str = DEFAULT_SOURCE
    event_type: str = DEFAULT_EVENT_TYPE
    max_connections: int = 100
    # How much of an answer is read; None: the transport's own default.
    max_response_bytes: int | None = None
    connect_timeout_s: float = 10.0
    probe_timeout_s: float = 5.0
    ca_file: str | None = None
    insecure: bool = False
    client_tls: ClientTls | None = None
    # Bodies of at least ``compression.above`` bytes go gzipped (signed before that).
    compression: Compression = OFF
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    idempotency_key: bool = True


class HttpTransport:
    """POSTs deliveries to one webhook endpoint over a pooled ``aiohttp`` session.

    The session is created lazily inside the running event loop and belongs to that loop: to
    use the transport from another loop (say, the next batch's ``asyncio.run``), ``close()``
    it in the first loop; it then reopens in the next (a session whose loop has ended is
    abandoned, not reused). Redirects are never followed. ``dropped_headers`` counts Kafka
    headers that were not forwarded.
    """

    # How much of a refusal is read, for the excerpt its reason quotes (an ack's outputs apart).
    default_max_response_bytes = DEFAULT_MAX_RESPONSE_BYTES

    def __init__(self, spec: WebhookSpec) -> None:
        self._url = _endpoint(spec.url)
        try:
            self._template = parse_url_template(spec.url)
        except ValueError as error:
            raise ConfigError("endpoint", str(error)) from None
        self._base = str(self._url.with_path("").with_query(None).with_fragment(None))
        if spec.method not in METHODS:
            raise ConfigError("method", f"{spec.method!r}: use one of {', '.join(METHODS)}")
        for name, value in spec.headers:
            why = refusal(name) or (
                "the value has a control character" if CONTROL.search(value) else None
            )
            if why is not None:
                raise ConfigError(f"headers.{name}", why)  # never the value
        if spec.secret is not None:
            signing.secret_key(spec.secret)  # fail now, not on the first delivery
        if spec.bearer_token is not None and not _is_token(spec.bearer_token):
            raise ConfigError("bearer_token", "must be printable ASCII without spaces")
        for key, text in (("source", spec.source), ("event_type", spec.event_type)):
            if not text or CONTROL.search(text):
                raise ConfigError(key, "must be non-empty and free of control characters")
        if spec.max_connections < 1:
            raise ConfigError("max_connections", "must be at least 1")
        limit = spec.max_response_bytes
        if limit is not None and limit < 0:
            raise ConfigError("max_response_bytes", "must not be negative")
        self._spec = spec
        self._max_response_bytes = self.default_max_response_bytes if limit is None else limit
        # A single webhook's refusal is read for its excerpt only (a batching transport reads
        # whole batch answers with ``_max_response_bytes``, and its single webhooks with this).
        self._max_excerpt_bytes = DEFAULT_MAX_RESPONSE_BYTES if limit is None else limit
        self._ssl = _ssl_setting(spec.ca_file, spec.insecure, spec.client_tls)
        self._client: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.dropped_headers = 0
        self.compression = spec.compression

    def __repr__(self) -> str:
        return f"HttpTransport({_redacted(self._url)!r})"  # never a secret or a token

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        started = time.monotonic()
        outcome, refused = await self._send_once(delivery, deadline_s, self.compression)
        if not refused:
            return outcome
        self.stop_compressing()
        left = deadline_s - (time.monotonic() - started)
        if left <= 0:
            return outcome_from_timeout(deadline_s)
        outcome, _ = await self._send_once(delivery, left, OFF)
        return outcome_from_timeout(deadline_s) if outcome.no_answer else outcome

    def stop_compressing(self) -> None:
        """The consumer refused a gzipped body (415): everything goes uncompressed from now on."""
        if self.compression.on:
            self.compression = OFF
            log.warning(
                "the consumer at %r answered 415 to a gzipped body: its deliveries go"
                " uncompressed from now on",
                self,
            )

    async def _send_once(
        self, delivery: Delivery, deadline_s: float, choice: Compression
    ) -> tuple[Outcome, bool]:
        """One request; the outcome, and whether the consumer refused its compression."""
        client = self._session()
        request = build_headers(
            delivery,
            timestamp_s=int(time.time()),
            secret=self._spec.secret,
            bearer_token=self._spec.bearer_token,
            source=self._spec.source,
            event_type=self._spec.event_type,
            static=self._spec.headers,
            idempotency_key=self._spec.idempotency_key,
        )
        self.dropped_headers += request.dropped
        sent = http_body(choice, delivery.value or b"", delivery.headers)
        try:
            async with client.request(
                self._spec.method,
                self._url_of(delivery),
                data=sent.data,
                headers=request.headers + sent.headers,
                allow_redirects=False,
                timeout=self._timeout(deadline_s),
            ) as response:
                self._answered(response.headers)
                outcome = outcome_from_http(response.status, response.headers, now_s=time.time())
                if outcome.kind is OutcomeKind.ACK and is_json(response.content_type):
                    body, complete = await read_body(response, MAX_OUTPUTS_BYTES)
                    return ack_from_body(response.content_type, body, complete), False
                text = await _read_excerpt(response, self._max_excerpt_bytes)
        except (aiohttp.ClientError, TimeoutError) as error:
            return outcome_from_request_error(error, deadline_s), False
        refused = refused_encoding(response.status, sent)
        if outcome.kind is OutcomeKind.DEAD and response.status == 413:
            size = len(delivery.value or b"")
            outcome = replace(outcome, reason=f"{outcome.reason} ({size} bytes)")
        if outcome.kind is OutcomeKind.ACK or not text:
            return outcome, refused
        return replace(outcome, reason=f"{outcome.reason}: {text}"), refused

    def _answered(self, headers: Mapping[str, str]) -> None:
        """What an answer's headers tell the transport (a batching transport listens)."""

    def _url_of(self, delivery: Delivery) -> URL:
        if self._template.is_static:
            return self._url
        # The origin as yarl made it (an IDN host in punycode), then the path and query, escaped.
        return URL(self._base + self._template.fill_target(delivery), encoded=True)

    async def probe(self) -> bool:
        """Any HTTP answer to an ``OPTIONS`` request means the endpoint is up (a template's
        URL up to its first placeholder)."""
        client = self._session()
        token = self._spec.bearer_token
        auth = () if token is None else (("authorization", bearer(token)),)
        first = next(iter(self._template.parts), "")
        prefix = first if isinstance(first, str) else ""
        url = self._url if self._template.is_static else URL(self._base + prefix, encoded=True)
        try:
            async with client.options(
                url,
                headers=auth,
                allow_redirects=False,
                timeout=self._timeout(self._spec.probe_timeout_s),
            ):
                return True
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def close(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()

    def _timeout(self, total_s: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=total_s, sock_connect=min(total_s, self._spec.connect_timeout_s)
        )

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is not loop:
            if self._loop is None or not self._loop.is_closed():
                raise RuntimeError(
                    "HttpTransport is in use by another event loop; close() it there first"
                )
            # Its loop ended without close() (a crashed batch): nothing can be awaited there now.
            self._client = None
        if self._client is not None:
            return self._client
        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._spec.max_connections, ssl=self._ssl),
            # Stateless: no cookies carried between deliveries, no compressed answers to inflate.
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("accept-encoding",),
            headers={"user-agent": _USER_AGENT},
        )
        self._loop = loop
        return self._client


def outcome_from_request_error(
    error: aiohttp.ClientError | TimeoutError, deadline_s: float
) -> Outcome:
    """What a request that got no HTTP answer means (docs/webhooks.md, the last rows)."""
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        return outcome_from_connection_error(error)  # never connected: nothing was delivered
    if isinstance(error, TimeoutError):
        return outcome_from_timeout(deadline_s)
    if isinstance(error, aiohttp.ClientConnectorError):
        return outcome_from_connection_error(error)  # refused or TLS failed: not delivered
    if isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        # The peer closed after the request went out (a process that died on it closes
        # cleanly): a suspect. A stale pooled connection looks the same and costs no
        # attempt either.
        return outcome_from_lost_connection(error)
    if isinstance(error, aiohttp.ClientOSError):
        # Reset after connecting: a process killed with the request unread resets. (TLS 1.3
        # refuses a missing client certificate this way too: every message then "dies",
        # and a suspect is never convicted while no other message is answered.)
        return outcome_from_lost_connection(error)
    # A TLS failure or an answer that is not HTTP.
    return outcome_from_connection_error(error)


async def _read_excerpt(response: aiohttp.ClientResponse, limit: int) -> str:
    """At most ``limit`` bytes of the answer, as a short printable excerpt.

    The status is already known, so a body that is cut, slow or broken changes nothing.
    """
    data, _ = await read_body(response, limit)
    return excerpt(data)


async def read_body(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the answer, and whether that is all of it. When it was not
    read to its end the connection is dropped rather than returned to the pool."""
    data = bytearray()
    complete = False
    try:
        while len(data) < limit:
            chunk = await response.content.read(limit - len(data))
            if not chunk:
                break
            data += chunk
        complete = response.content.at_eof()
    except (aiohttp.ClientError, TimeoutError):
        pass
    if not complete:
        response.close()
    return bytes(data), complete


def excerpt(data: bytes) -> str:
    """A response body squeezed into one short printable line, for an outcome's reason."""
    text = data[: _REASON_EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.split())[:_REASON_EXCERPT_CHARS]


def _endpoint(url: str) -> URL:
    try:
        parsed = URL(url)
    except ValueError:
        raise ConfigError("endpoint", "not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(
            "endpoint", f"must be http://host/... or https://host/...: {_redacted(parsed)!r}"
        )
    return parsed


def _redacted(url: URL) -> str:
    return str(url.with_user(None)) if url.user or url.password else str(url)


def _is_token(token: str) -> bool:
    return bool(token) and token.isascii() and token.isprintable() and " " not in token


def _ssl_setting(
    ca_file: str | None, insecure: bool, client_tls: ClientTls | None = None
) -> ssl.SSLContext | bool:
    if client_tls is not None and ca_file is None and not insecure:
        return client_tls.ssl_context()
    if insecure and ca_file is not None:
        raise ConfigError("ca_file", "ca_file and insecure=True contradict each other")
    if insecure:
        return False
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError("ca_file", f"cannot load {ca_file}: {error}") from None
