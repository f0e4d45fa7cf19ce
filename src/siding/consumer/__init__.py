"""The Python SDK for consumer services, kept under this name for existing users.

The SDK itself is the thin distribution ``siding-consumer`` (``sdk/python``, imported as
``siding_consumer``), which needs neither Spark nor Kafka: a consumer service should install
that alone. Everything here is the same objects under the old names.
"""

from siding_consumer import (
    ConsumerServer,
    DeadLetter,
    Delivery,
    Handler,
    Output,
    Reply,
    WebhookApp,
    WebhookVerificationError,
    WebhookVerifier,
    ack,
    backoff,
    dead,
    retry,
    serve,
    verify_webhook,
)

__all__ = [
    "ConsumerServer",
    "DeadLetter",
    "Delivery",
    "Handler",
    "Output",
    "Reply",
    "WebhookApp",
    "WebhookVerificationError",
    "WebhookVerifier",
    "ack",
    "backoff",
    "dead",
    "retry",
    "serve",
    "verify_webhook",
]
