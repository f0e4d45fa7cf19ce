"""Standard Webhooks signatures (https://www.standardwebhooks.com): sign on send, verify on receipt.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}``; the signature is HMAC-SHA256,
sent as ``v1,<base64>``. A ``whsec_<base64>`` secret is base64-decoded (the spec's serialization);
any other secret is used as its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping

from siding_consumer.errors import ConfigError, SidingError

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_S = 300.0

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
_MAX_DIGITS = 15  # far beyond any real Unix time, and keeps int() cheap


class WebhookVerificationError(SidingError):
    """A webhook request is not authentic or not fresh.

    ``problem`` is stable and machine-readable: ``missing-header``, ``bad-timestamp``,
    ``stale-timestamp``, ``future-timestamp`` or ``bad-signature``.
    """

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


def secret_key(secret: str) -> bytes:
    """The HMAC key behind a configured secret; raises ``ConfigError`` when it is unusable."""
    if secret.startswith(SECRET_PREFIX):
        encoded = secret[len(SECRET_PREFIX) :]
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            # Never echo the secret itself into an error message.
            raise ConfigError("secret", "a whsec_ secret must be base64 after the prefix") from None
    else:
        key = secret.encode()
    if not key:
        raise ConfigError("secret", "the webhook secret must not be empty")
    return key


def _digest(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The ``webhook-signature`` value for one message: ``v1,<base64 HMAC-SHA256>``."""
    digest = _digest(secret_key(secret), msg_id, str(timestamp_s), body)
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now_s: float | None = None,
) -> str:
    """Check a webhook's Standard Webhooks headers against its raw body; return the webhook id.

    Header names are matched case-insensitively. Raises ``WebhookVerificationError``.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get(ID_HEADER, "")
    timestamp = lowered.get(TIMESTAMP_HEADER, "").strip()
    signatures = lowered.get(SIGNATURE_HEADER, "")
    required = {ID_HEADER: msg_id, TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signatures}
    missing = [name for name, value in required.items() if not value]
    if missing:
        raise WebhookVerificationError("missing-header", f"missing header: {', '.join(missing)}")
    # Digits only: a signed timestamp must not be able to absorb a '.' from the id or body.
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_DIGITS):
        raise WebhookVerificationError("bad-timestamp", f"{TIMESTAMP_HEADER} is not an integer")
    now = time.time() if now_s is None else now_s
    age = now - int(timestamp)
    if age > tolerance_s:
        raise WebhookVerificationError(
            "stale-timestamp", f"{TIMESTAMP_HEADER} is {age:.0f}s old (tolerance {tolerance_s:g}s)"
        )
    if -age > tolerance_s:
        raise WebhookVerificationError(
            "future-timestamp",
            f"{TIMESTAMP_HEADER} is {-age:.0f}s in the future (tolerance {tolerance_s:g}s)",
        )
    expected = _digest(secret_key(secret), msg_id, timestamp, body)
    matched = False
    for candidate in signatures.split():
        version, _, encoded = candidate.partition(",")
        if version != SIGNATURE_VERSION:
            continue  # other schemes (v1a) are not ours to check
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        # No early exit: every candidate costs the same, whichever one matches.
        matched |= hmac.compare_digest(expected, given)
    if not matched:
        raise WebhookVerificationError("bad-signature", "no webhook-signature matches the body")
    return msg_id
