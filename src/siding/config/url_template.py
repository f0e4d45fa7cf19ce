"""Webhook URL templates (``https://host/orders/{key}``): parsed once when the configuration is
loaded, filled for each delivery. docs/webhooks.md, "The request's URL", is the contract.

Pure: ``parse_url_template`` raises ``ValueError`` with a message for the user (the caller adds
the key); ``UrlTemplate.fill`` never fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from siding.model import Delivery

FIELDS = ("topic", "partition", "offset", "key")
HEADER_PREFIX = "header."
# What a literal part of a templated URL keeps as it is: RFC 3986's reserved and unreserved
# characters and '%' (an escape the user wrote); anything else (a space, say) is escaped.
_LITERAL_SAFE = "/:?#[]@!$&'()*+,;=%-._~"


@dataclass(frozen=True, slots=True)
class Placeholder:
    """``{topic}``, ``{partition}``, ``{offset}``, ``{key}``, or ``{header.NAME}`` (``header``
    is then ``NAME``)."""

    field: str
    header: str | None = None


@dataclass(frozen=True, slots=True)
class UrlTemplate:
    """A URL as its origin (``scheme://host:port``, as written) and the rest of it: literal text
    and placeholders, in order. A static URL is all origin."""

    origin: str
    parts: tuple[str | Placeholder, ...] = ()

    @property
    def is_static(self) -> bool:
        """Whether the URL has no placeholder (every delivery goes to the same URL)."""
        return not self.parts

    def fill(self, delivery: Delivery) -> str:
        """The URL for ``delivery``, every value percent-encoded (a ``/`` in a key stays inside
        its path segment)."""
        return self.origin + self.fill_target(delivery)

    def fill_target(self, delivery: Delivery) -> str:
        """The path and query for ``delivery``, percent-encoded (what follows the origin)."""
        return "".join(
            part if isinstance(part, str) else _value(part, delivery) for part in self.parts
        )


def parse_url_template(url: str) -> UrlTemplate:
    """The template in ``url``. Placeholders may only stand in the path or the query: the host
    and port are the endpoint's, one connection pool and breaker each."""
    if "{" not in url and "}" not in url:
        return UrlTemplate(url)
    origin = _origin(url)
    parts: list[str | Placeholder] = []
    literal_start = len(origin)
    pos = literal_start
    while pos < len(url):
        char = url[pos]
        if char == "}":
            raise ValueError(f"{url!r}: unbalanced '}}' at character {pos + 1}")
        if char != "{":
            pos += 1
            continue
        end = url.find("}", pos + 1)
        inner = url[pos + 1 : end] if end != -1 else url[pos + 1 :]
        if end == -1 or "{" in inner:
            raise ValueError(f"{url!r}: unbalanced '{{' at character {pos + 1}")
        if pos > literal_start:
            parts.append(_literal(url[literal_start:pos]))
        parts.append(_placeholder(url, inner))
        pos = literal_start = end + 1
    if literal_start < len(url):
        parts.append(_literal(url[literal_start:]))
    return UrlTemplate(origin, tuple(parts))


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, which must hold no brace."""
    scheme, sep, rest = url.partition("://")
    end = min((i for i in (rest.find("/"), rest.find("?")) if i != -1), default=len(rest))
    origin = f"{scheme}{sep}{rest[:end]}"
    if not sep or "{" in origin or "}" in origin:
        raise ValueError(
            f"{url!r}: a placeholder may stand only in the path or the query, not in the"
            " scheme, host or port"
        )
    return origin


def _literal(text: str) -> str:
    return quote(text, safe=_LITERAL_SAFE)


def _placeholder(url: str, inner: str) -> Placeholder:
    if inner in FIELDS:
        return Placeholder(inner)
    if inner.startswith(HEADER_PREFIX) and len(inner) > len(HEADER_PREFIX):
        return Placeholder("header", inner.removeprefix(HEADER_PREFIX))
    known = ", ".join(f"{{{name}}}" for name in FIELDS)
    raise ValueError(f"{url!r}: unknown placeholder {{{inner}}}: use {known} or {{header.NAME}}")


def _escaped(value: str | bytes) -> str:
    """``value`` percent-encoded as one path segment or query value. A value of ``.`` or ``..``
    has its dots encoded too: left as they are, a server or proxy would resolve them as dot
    segments (``/orders/..`` is ``/``) and the request would land on another resource."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in {".", ".."} else encoded


def _value(placeholder: Placeholder, delivery: Delivery) -> str:
    match placeholder.field:
        case "topic":
            return _escaped(delivery.topic)
        case "partition":
            return str(delivery.partition)
        case "offset":
            return str(delivery.offset)
        case "key":
            return _escaped(delivery.key or b"")  # a null key: empty
    found = b""
    for name, value in delivery.headers:
        if name == placeholder.header:
            found = value  # the last one wins, as Kafka's Headers.lastHeader does
    return _escaped(found)
