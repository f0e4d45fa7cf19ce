"""Standard Webhooks signatures (https://www.standardwebhooks.com): sign on send, verify on receipt.

The scheme is written once, in the thin consumer SDK (``siding_consumer.signing``), which
consumer services verify with; the HTTP transport signs with the same code.
"""

from siding_consumer.signing import (
    DEFAULT_TOLERANCE_S,
    ID_HEADER,
    SECRET_PREFIX,
    SIGNATURE_HEADER,
    SIGNATURE_VERSION,
    TIMESTAMP_HEADER,
    WebhookVerificationError,
    secret_key,
    sign,
    verify,
)

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "ID_HEADER",
    "SECRET_PREFIX",
    "SIGNATURE_HEADER",
    "SIGNATURE_VERSION",
    "TIMESTAMP_HEADER",
    "WebhookVerificationError",
    "secret_key",
    "sign",
    "verify",
]
