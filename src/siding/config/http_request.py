"""``[route.http]``: the shape of a webhook request beyond its URL: the method, static headers
and the ``Idempotency-Key`` (docs/webhooks.md, "The request's shape")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, field_serializer, field_validator

from siding.config.fields import Problem
from siding.config.http_grammar import CONTROL, FRAMING_NAMES, HEADER_NAME, OWN_PREFIXES

METHODS = ("POST", "PUT", "PATCH")
# Every header siding writes on a webhook (siding.transport.http_headers), and those that change
# how the request itself is carried: a static header may be none of them.
_OWN_NAMES = FRAMING_NAMES | {"idempotency-key", "user-agent", "accept-encoding"}
_HINTS = {
    "authorization": " (give a bearer token as route.auth.token)",
    "idempotency-key": " (the delivery id; route.http.idempotency_key = false sends none)",
}


def refusal(name: str) -> str | None:
    """Why ``name`` cannot be a static header, or ``None`` when it can; pure."""
    if not HEADER_NAME.fullmatch(name):
        return "not an HTTP header name (RFC 9110 token characters only)"
    lowered = name.lower()
    if lowered in _OWN_NAMES or lowered.startswith(OWN_PREFIXES):
        return f"siding sets this header itself{_HINTS.get(lowered, '')}"
    return None


class HttpConfig(BaseModel):
    """``[route.http]``: for webhook endpoints only. Header values are secrets: never shown."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    method: str = "POST"
    headers: tuple[tuple[str, SecretStr], ...] = ()
    idempotency_key: bool = True

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, value: Any) -> Any:
        if isinstance(value, str) and value.upper() in METHODS:
            return value.upper()
        raise ValueError(f"{value!r}: use one of {', '.join(METHODS)}")

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: Any) -> Any:
        if isinstance(value, tuple):
            return value  # already validated (a model copied or rebuilt)
        if not isinstance(value, Mapping):
            raise ValueError('expected a table of name = "value"')
        seen: set[str] = set()
        out: list[tuple[str, SecretStr]] = []
        for name, given in value.items():
            why = refusal(name)
            if why is not None:
                raise Problem((name,), why)
            if name.lower() in seen:
                raise Problem((name,), "given twice (header names are case-insensitive)")
            seen.add(name.lower())
            text = given.get_secret_value() if isinstance(given, SecretStr) else given
            if not isinstance(text, str):
                raise Problem((name,), "expected a string")
            if CONTROL.search(text):  # the value itself is never echoed
                raise Problem((name,), "the value contains a control character (a line break?)")
            out.append((name, SecretStr(text)))
        return tuple(out)

    @field_serializer("headers")
    def _masked(self, headers: tuple[tuple[str, SecretStr], ...]) -> dict[str, str]:
        return {name: "**********" for name, _ in headers}

    def header_values(self) -> tuple[tuple[str, str], ...]:
        """The static headers with their values, for the transport."""
        return tuple((name, value.get_secret_value()) for name, value in self.headers)
