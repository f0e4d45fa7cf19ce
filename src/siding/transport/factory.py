"""Build the transport a route's endpoint needs (gRPC stream/unary or HTTP webhook)."""

from __future__ import annotations

from siding.config import Endpoint, RouteConfig
from siding.transport.base import Transport


def _secret(value: object) -> str | None:
    getter = getattr(value, "get_secret_value", None)
    return str(getter()) if getter is not None else None


def make_transport(route: RouteConfig, endpoint: Endpoint, max_connections: int) -> Transport:
    """A new transport for one endpoint; the caller owns it (reuse it, close it)."""
    auth = route.auth
    token = _secret(auth.token)
    if endpoint.is_grpc:
        from siding.transport.grpc_stream import GrpcStreamTransport
        from siding.transport.grpc_unary import GrpcUnaryTransport

        kind = GrpcStreamTransport if route.transport == "stream" else GrpcUnaryTransport
        return kind(endpoint.grpc_target, tls=endpoint.tls, ca_file=auth.ca_file, token=token)
    from siding.transport.http import HttpTransport

    return HttpTransport(
        endpoint.url,
        secret=_secret(auth.webhook_secret),
        bearer_token=token,
        source=f"kafka://{route.topic}",
        max_connections=max_connections,
        ca_file=auth.ca_file,
    )
