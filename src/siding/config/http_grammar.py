"""What an HTTP header may be, for every part of siding that writes one (the static headers of
``[route.http]``, the Kafka headers a webhook forwards, the auth header): RFC 9110's grammar and
the names that belong to siding or to the request's framing; pure."""

from __future__ import annotations

import re

# RFC 9110 field-name: token characters only.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Every control character but HTAB (CR, LF and NUL included): never in a header value.
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Header names siding writes on every webhook (CloudEvents, Standard Webhooks, its own).
OWN_PREFIXES = ("ce-", "webhook-", "siding-")
# Names that change how the request itself is carried (hop-by-hop and framing), or that siding
# sets from the route (``authorization`` from ``route.auth``; ``content-encoding`` when it
# compresses the body, and a producer's would make the consumer decode a value encoded already,
# before verifying a signature made over it).
FRAMING_NAMES = frozenset(
    {
        "authorization",
        "content-encoding",
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "proxy-authorization",
        "proxy-connection",
    }
)
