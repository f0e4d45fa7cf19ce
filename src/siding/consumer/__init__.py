"""The Python SDK for consumer services, kept under this name for existing users.

The SDK itself is the thin distribution ``siding-consumer`` (``sdk/python``, imported as
``siding_consumer``), which needs neither Spark nor Kafka: a consumer service should install
that alone. Everything here is the same objects under the old names; the batch envelope helpers of
``siding.consumer.batch`` work on the proxy's ``Result`` as before.
"""

from siding.consumer.batch import (
    BatchEnvelopeError,
    answer_batch,
    batch_answer,
    deliveries_from_batch,
    is_batch,
)
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
    "BatchEnvelopeError",
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
    "answer_batch",
    "backoff",
    "batch_answer",
    "dead",
    "deliveries_from_batch",
    "is_batch",
    "retry",
    "serve",
    "verify_webhook",
]
