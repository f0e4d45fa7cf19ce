"""Pure: a consumer instance's join request, read and checked (docs/registration.md).

``{"address": "10.0.0.5:50051", "transport": "grpc", "capacity": 100}``: ``address`` is a
``host:port`` (``host:port/path`` for HTTP) with ``transport`` one of grpc, grpcs, http, https
(default grpc), or a whole endpoint URL as a ``[[route]]`` takes it (``transport`` may then be
left out). ``capacity`` weighs how deliveries are spread (default 100).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from siding.config import Endpoint, RouteConfig
from siding.errors import ConfigError

DEFAULT_CAPACITY = 100
MAX_CAPACITY = 100_000
TRANSPORTS = ("grpc", "grpcs", "http", "https")
_KEYS = ("address", "transport", "capacity")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    endpoint: Endpoint
    capacity: int = DEFAULT_CAPACITY


def join_request(body: object) -> JoinRequest:
    """The request in ``body`` (parsed JSON); ``ConfigError`` names the bad key."""
    if not isinstance(body, Mapping):
        raise ConfigError("", "the body must be a JSON object with address (and transport)")
    for key in body:
        if key not in _KEYS:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(_KEYS)})")
    return JoinRequest(_endpoint(body), _capacity(body.get("capacity", DEFAULT_CAPACITY)))


def _endpoint(body: Mapping[str, Any]) -> Endpoint:
    address, transport = body.get("address"), body.get("transport")
    if not isinstance(address, str) or not address.strip():
        raise ConfigError("address", "required: host:port, or an endpoint URL")
    if transport is not None and transport not in TRANSPORTS:
        raise ConfigError("transport", f"{transport!r}: use one of {', '.join(TRANSPORTS)}")
    address = address.strip()
    url = address if "://" in address else f"{transport or 'grpc'}://{address}"
    try:
        endpoint = Endpoint.parse(url)
    except ValueError as exc:
        raise ConfigError("address", str(exc)) from None
    if transport is not None and "://" in address and _family(endpoint) != transport:
        raise ConfigError("transport", f"{transport!r} does not match the address {address!r}")
    return endpoint


def _family(endpoint: Endpoint) -> str:
    return endpoint.scheme.removesuffix("+dns")


def _capacity(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CAPACITY:
        raise ConfigError("capacity", f"must be a whole number from 1 to {MAX_CAPACITY}")
    return value


def refusal(route: RouteConfig, endpoint: Endpoint) -> str | None:
    """Why ``endpoint`` cannot serve ``route`` (its client certificates need TLS, its batches
    one URL), or ``None``."""
    auth = route.auth
    batched = route.batching(endpoint) is not None
    if batched and not endpoint.is_grpc and not endpoint.url_template().is_static:
        return (
            f"route {route.name} sends batches: join with an address without placeholders (a URL"
            " template needs one request per record)"
        )
    if not endpoint.tls and any(p is not None for p in (auth.ca_pem, auth.cert_pem, auth.key_pem)):
        return (
            f"route {route.name} speaks TLS with its own certificates ([route.auth]): join with"
            " a grpcs:// or https:// address"
        )
    return None
