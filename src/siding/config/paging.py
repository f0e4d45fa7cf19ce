"""``[route.dlq_page]``: announce new dead letters as signed CloudEvents to a notification URL.

Off unless the table is there. docs/dlq.md, "A page for every dead letter", says what is sent.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from siding.config.fields import Count, PositiveDuration
from siding.config.url_template import parse_url_template
from siding.config.values import check_webhook_secret, parse_endpoint_url

DEFAULT_EVERY_S = 60.0
DEFAULT_MAX_LETTERS = 20
MAX_LETTERS = 500
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 300.0


class DlqPageConfig(BaseModel):
    """Where a route's pages go (``url``, signed with ``secret``), at most one per ``every``,
    each listing at most ``max_letters`` letters (and counting all); ``timeout`` bounds a send."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    url: str
    secret: SecretStr
    secret_file: str | None = None  # the loader has read it into ``secret``
    every: PositiveDuration = DEFAULT_EVERY_S
    max_letters: Count = Field(default=DEFAULT_MAX_LETTERS, ge=1, le=MAX_LETTERS)
    timeout: PositiveDuration = DEFAULT_TIMEOUT_S

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if "@" in urlsplit(value.strip()).netloc:  # only the rule is echoed, not the URL
            raise ValueError(
                "credentials in the URL are not allowed; the page is signed with secret"
            )
        parsed = parse_endpoint_url(value)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(
                f"{parsed.scheme}://...: a page is an HTTP POST; use http:// or https://"
            )
        if not parse_url_template(parsed.url).is_static:
            raise ValueError(
                "a page carries many letters: its URL takes no {placeholders} (write a"
                " literal { as %7B)"
            )
        return parsed.url

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: SecretStr) -> SecretStr:
        check_webhook_secret(value.get_secret_value())
        return value

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if value > MAX_TIMEOUT_S:
            raise ValueError(f"must be at most {MAX_TIMEOUT_S:g}s")
        return value


def shown_url(url: str) -> str:
    """``url`` for display (``check-config``, ``GET /routes``): its scheme and host only, the
    path and query masked, since an alerting service's URL often carries its token there."""
    parts = urlsplit(url)
    rest = "/***" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{rest}"
