"""Pure parsers for the values ``siding.toml`` holds: names, durations, URLs, ``${VAR}``.

Each raises ``ValueError`` with a message meant for the user; the caller adds the key.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from siding.config.url_template import parse_url_template

_SECRET_NAME = re.compile(
    r"password|passwd|secret|token|credential|jaas|oauthbearer\.config|key\.pem|keystore\.key"
    r"|access\.key",
    re.I,
)


def looks_secret(name: str) -> bool:
    """Whether a pass-through setting's name says its value is a credential."""
    return _SECRET_NAME.search(name) is not None


def check_webhook_secret(secret: str) -> None:
    """A Standard Webhooks secret is ``whsec_<base64>`` or any other non-empty text (its bytes),
    the rule ``siding.transport.signing`` signs with; raises ``ValueError`` (never echoing it)."""
    if not secret:
        raise ValueError("must not be empty")
    if not secret.startswith("whsec_"):
        return
    encoded = secret.removeprefix("whsec_")
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded:
        raise ValueError("a whsec_ secret must be base64 after the prefix")


# -- durations -----------------------------------------------------------------------------------

_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001))
_UNIT_NAMES = tuple(unit for unit, _ in _UNITS)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_BARE_NUMBER = re.compile(r"[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")


def parse_duration(text: str) -> float:
    """Seconds in ``"250ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"`` or e.g. ``"1m30s"``."""
    s = text.strip()
    if s.startswith("-"):
        raise ValueError(f"{text!r}: negative durations are not allowed")
    if _BARE_NUMBER.fullmatch(s):
        raise ValueError(f"{text!r} has no unit (ambiguous): write e.g. '{s}s' or '{s}ms'")
    if not s:
        raise ValueError("empty duration: write e.g. '10s'")
    total, pos, last = 0.0, 0, -1
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        rank = _UNIT_NAMES.index(match.group(2)) if match else -1
        if match is None or rank <= last:  # units must be given largest first, once each
            raise ValueError(
                f"{text!r} is not a duration: write e.g. '250ms', '10s', '5m', '1h' or '1m30s'"
            )
        total += float(match.group(1)) * _UNITS[rank][1]
        pos, last = match.end(), rank
    return total


def format_duration(seconds: float) -> str:
    """The duration string for ``seconds``, to the millisecond: ``90.25`` -> ``"1m30s250ms"``."""
    left = round(seconds * 1000)
    parts: list[str] = []
    for unit, size in _UNITS:
        count, left = divmod(left, round(size * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


# -- addresses -----------------------------------------------------------------------------------

Scheme = Literal["grpc", "grpcs", "grpc+dns", "grpcs+dns", "http", "https"]
SCHEMES: tuple[Scheme, ...] = ("grpc", "grpcs", "grpc+dns", "grpcs+dns", "http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class ParsedUrl:
    url: str
    scheme: Scheme
    host: str
    port: int


def parse_endpoint_url(url: str) -> ParsedUrl:
    """An endpoint URL's scheme, host and port; no credentials, no gRPC path. A webhook URL may
    hold placeholders in its path and query (siding.config.url_template)."""
    text = url.strip()
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme not in SCHEMES:
        raise ValueError(
            f"{text!r}: unsupported scheme; use grpc://, grpcs://, grpc+dns:///, http:// or https://"
        )
    if scheme in _DEFAULT_PORTS:
        parse_url_template(text)  # a webhook URL may be a template: check it before the rest
    parts = urlsplit(text)
    if scheme.endswith("+dns"):
        if parts.netloc:
            raise ValueError(f"{text!r}: write {scheme}:///host:port (three slashes)")
        parts = urlsplit("//" + parts.path.lstrip("/"))
    if parts.username is not None or parts.password is not None:
        # Only the scheme is echoed: the rest holds a credential.
        raise ValueError(
            f"{scheme}://...: credentials in the URL are not allowed; use [route.auth]"
        )
    if not parts.hostname:
        raise ValueError(f"{text!r}: the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r}: the port is not a number in 1-65535") from None
    if port is None:
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"{text!r}: gRPC endpoints need a port, e.g. {scheme}://host:50051")
        port = _DEFAULT_PORTS[scheme]
    if port == 0:
        raise ValueError(f"{text!r}: port 0 is not an endpoint")
    if scheme.startswith("grpc") and (parts.path not in ("", "/") or parts.query):
        raise ValueError(f"{text!r}: gRPC endpoints take no path or query")
    if parts.fragment:
        raise ValueError(f"{text!r}: the URL has a #fragment")
    return ParsedUrl(text, scheme, parts.hostname, port)


def parse_host_port(text: str, what: str, *, allow_zero: bool = False) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; port 0 ("pick a free port") only when ``allow_zero``."""
    parts = urlsplit("//" + text.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or (port == 0 and not allow_zero) or parts.path:
        raise ValueError(f"{text!r}: {what} must be host:port")
    return parts.hostname, port


# -- environment ---------------------------------------------------------------------------------

_REFERENCE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` (default when unset or empty); ``$$`` is ``$``.

    A ``$`` followed by anything else stays as it is.
    """
    out: list[str] = []
    pos = 0
    while (start := text.find("$", pos)) != -1:
        out.append(text[pos:start])
        match = _REFERENCE.match(text, start)
        if match is None:
            if text.startswith("${", start):
                raise ValueError(
                    f"bad reference {text[start : start + 24]!r}:"
                    " write ${NAME} or ${NAME:-default}, and $$ for a literal $"
                )
            out.append("$")
            pos = start + 1
            continue
        name, default = match.group(2), match.group(3)
        if match.group(1):
            out.append("$")
        elif env.get(name):
            out.append(env[name])
        elif default is not None:
            out.append(default)
        elif name in env:
            out.append("")
        else:
            raise ValueError(
                f"environment variable {name} is not set (or write ${{{name}:-default}})"
            )
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)
