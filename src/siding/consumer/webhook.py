"""For webhook consumers: verify siding's requests, answer them with a handler. The code lives in
the thin SDK (``siding_consumer.webhook``); this name is kept for existing users."""

from siding_consumer.webhook import (
    DEFAULT_MAX_BODY_BYTES,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    WebhookApp,
    WebhookVerificationError,
    WebhookVerifier,
    verify_webhook,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "ASGIApp",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "WebhookApp",
    "WebhookVerificationError",
    "WebhookVerifier",
    "verify_webhook",
]
