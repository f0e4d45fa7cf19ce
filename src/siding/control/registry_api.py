"""The control API's calls for routes made at runtime and consumer instances that join them,
with their token rules (docs/registration.md, "The calls")."""

from __future__ import annotations

from siding.control.registry import RegistryService
from siding.control.tokens import bearer, check_token, same_token
from siding.pipeline.driver.controls import ControlError

Answer = tuple[int, dict[str, object]]


def path_parts(path: str) -> list[str]:
    return [p for p in path.split("?", 1)[0].split("/") if p]


def read_call(registry: RegistryService, path: str) -> Answer | None:
    """``GET /routes`` and ``GET /routes/<name>/consumers`` (no token, like ``/status``); ``None``
    for any other path."""
    parts = path_parts(path)
    if parts == ["routes"]:
        return 200, registry.list_routes()
    if len(parts) == 3 and parts[0] == "routes" and parts[2] == "consumers":
        return 200, registry.consumers(parts[1])
    return None


def change_call(
    registry: RegistryService,
    admin_token: str | None,
    *,
    method: str,
    path: str,
    authorization: str | None,
    body: bytes,
    peer: str,
) -> Answer | None:
    """A call that changes the registry, or ``None`` when ``method path`` is not one of them
    (pause, resume and the other route controls). Raises ``ControlError``."""
    parts = path_parts(path)
    if not parts or parts[0] != "routes":
        return None
    if parts == ["routes"] and method == "POST":
        who = _admin(admin_token, authorization, peer)
        return 201, registry.create_route(body, who)
    if len(parts) == 2 and method == "DELETE":
        who = _admin(admin_token, authorization, peer)
        return 200, registry.delete_route(parts[1], who)
    if len(parts) < 3 or parts[2] != "consumers":
        return None
    name, rest = parts[1], parts[3:]
    if not rest and method == "POST":
        who = _joiner(registry, admin_token, route=name, authorization=authorization, peer=peer)
        return registry.join(name, body, who)
    renewal = (len(rest) == 1 and method == "PUT") or (
        len(rest) == 2 and rest[1] == "renew" and method == "POST"
    )
    if renewal:
        _joiner(registry, admin_token, route=name, authorization=authorization, peer=peer)
        return 200, registry.renew(name, rest[0])
    if len(rest) == 1 and method == "DELETE":
        who = _joiner(registry, admin_token, route=name, authorization=authorization, peer=peer)
        return 200, registry.leave(name, rest[0], who)
    raise ControlError(404, f"no such call: {method} {path}")


def _admin(admin_token: str | None, authorization: str | None, peer: str) -> str:
    refusal = check_token(admin_token, authorization)
    if refusal is not None:
        raise ControlError(*refusal)
    return f"admin@{peer}"


def _joiner(
    registry: RegistryService,
    admin_token: str | None,
    *,
    route: str,
    authorization: str | None,
    peer: str,
) -> str:
    """Who joins (``admin@peer`` or ``registration@peer``): the route's registration token or
    the admin token. 401 without a bearer token, then 404 for a route that does not exist,
    403 for a token that is neither."""
    given = bearer(authorization)
    if given is None:
        raise ControlError(
            401,
            "a bearer token is needed (Authorization: Bearer <the route's registration_token or"
            " the [control] token>)",
        )
    route_token = registry.join_token(route)
    if same_token(given, admin_token):
        return f"admin@{peer}"
    if same_token(given, route_token):
        return f"registration@{peer}"
    if not admin_token and not route_token:
        raise ControlError(403, f"joining route {route} is off: give it a registration_token")
    raise ControlError(403, "wrong token")
