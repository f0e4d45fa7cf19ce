"""Bearer tokens of the control API: pure checks, constant-time comparisons."""

from __future__ import annotations

import hmac


def check_token(token: str | None, authorization: str | None) -> tuple[int, str] | None:
    """Pure: ``None`` when the bearer token is right; else the status and why (401 without a
    token, 403 with a wrong one, 403 when the config sets none: mutating calls are off)."""
    if not token:
        return 403, "mutating calls are off: set [control] token in the config to allow them"
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return 401, "a bearer token is needed (Authorization: Bearer <[control] token>)"
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return 403, "wrong token"
    return None


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``."""
    scheme, _, given = (authorization or "").partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None


def same_token(given: str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(given.encode(), str(token).encode())
