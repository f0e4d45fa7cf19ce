"""Build the transport a route's endpoint needs (gRPC stream/unary or HTTP webhook)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from siding.config import Endpoint, RouteConfig
from siding.config.models import DEFAULT_BATCH
from siding.transport.base import Transport
from siding.transport.batching import BatchLimits
from siding.transport.compression import Compression
from siding.transport.tls import ClientTls

if TYPE_CHECKING:  # the gRPC and HTTP modules are imported only by a route that uses them
    from siding.transport.grpc_common import ChannelSpec
    from siding.transport.http import WebhookSpec


def _secret(value: object) -> str | None:
    getter = getattr(value, "get_secret_value", None)
    return str(getter()) if getter is not None else None


def _pem(value: object) -> bytes | None:
    text = _secret(value)
    return text.encode() if text else None


def client_tls(route: RouteConfig) -> ClientTls | None:
    """The route's CA and client certificate (the config loader already read the files)."""
    auth = route.auth
    material = ClientTls(_pem(auth.ca_pem), _pem(auth.cert_pem), _pem(auth.key_pem))
    return material if material != ClientTls() else None


# An HTTP batch without a route limit stays under this (a single larger record goes alone).
HTTP_BATCH_BYTES = 4 * 1024 * 1024


def batch_limits(route: RouteConfig, endpoint: Endpoint) -> BatchLimits | None:
    """How the route's deliveries to ``endpoint`` are gathered, or ``None`` when they go one per
    call (``RouteConfig.batching``: a gRPC stream batches by default; an HTTP route offers
    batches, ``RouteConfig.offers_batches``). A gRPC frame stays within the channel's send
    limit, which ``max_message_bytes`` sets."""
    batching = route.batching(endpoint)
    if batching is None and route.offers_batches(endpoint):
        batching = DEFAULT_BATCH  # once the consumer says it reads batches
    if batching is None:
        return None
    max_bytes = route.message_limit or HTTP_BATCH_BYTES
    return BatchLimits(batching.max, batching.linger, max_bytes)


def compression(route: RouteConfig) -> Compression:
    """The route's compression on the wire (off unless ``compression`` is set)."""
    return Compression(route.compression, route.compress_above)


def channel_spec(route: RouteConfig, endpoint: Endpoint) -> ChannelSpec:
    """How the gRPC transports reach ``endpoint``: its TLS, the route's token, and a send limit
    of the route's ``max_message_bytes`` when it has one."""
    from siding.transport.grpc_common import ChannelSpec

    limit = route.message_limit
    return ChannelSpec(
        endpoint.grpc_target,
        tls=endpoint.tls,
        options=(("grpc.max_send_message_length", limit),) if limit else (),
        client_tls=client_tls(route) if endpoint.tls else None,
        token=_secret(route.auth.token),
        compression=compression(route),
    )


def webhook_spec(route: RouteConfig, endpoint: Endpoint, max_connections: int) -> WebhookSpec:
    """How the HTTP transports reach ``endpoint``: the route's signing secret and token, its TLS,
    and its request shape (``[route.http]``)."""
    from siding.transport.http import WebhookSpec

    auth, shape = route.auth, route.http
    return WebhookSpec(
        endpoint.url,
        secret=_secret(auth.webhook_secret),
        bearer_token=_secret(auth.token),
        source="kafka://{topic}",  # each delivery's origin topic
        max_connections=max_connections,
        client_tls=client_tls(route) if endpoint.tls else None,
        method=shape.method,
        headers=shape.header_values(),
        idempotency_key=shape.idempotency_key,
        compression=compression(route),
    )


def make_transport(route: RouteConfig, endpoint: Endpoint, max_connections: int) -> Transport:
    """A new transport for one endpoint; the caller owns it (reuse it, close it)."""
    limits = batch_limits(route, endpoint)
    if endpoint.is_grpc:
        from siding.transport.grpc_stream import GrpcStreamTransport
        from siding.transport.grpc_unary import GrpcUnaryTransport

        spec = channel_spec(route, endpoint)
        if limits is not None:
            from siding.transport.grpc_batch import GrpcBatchTransport

            return GrpcBatchTransport(spec, limits=limits)
        kind = GrpcStreamTransport if route.transport == "stream" else GrpcUnaryTransport
        return kind(spec)
    from siding.transport.http import HttpTransport

    webhook = webhook_spec(route, endpoint, max_connections)
    if limits is not None:
        from siding.transport.http_batch import HttpBatchTransport

        return HttpBatchTransport(webhook, limits=limits, offered=route.offers_batches(endpoint))
    return HttpTransport(webhook)
