"""Python SDK for consumer services: receive deliveries from siding over gRPC.

A consumer in ten lines::

    from siding.consumer import Delivery, Reply, ack, dead, retry, serve

    async def handle(d: Delivery) -> Reply:
        if d.value is None:
            return ack()  # a tombstone: nothing to do
        if not d.value.startswith(b"{"):
            return dead("not JSON")  # never retried: straight to the dead-letter topic
        if not await charge(d.id, d.value):  # deduplicate on d.id: stable across retries
            return retry(after_s=30, reason="payment provider busy")
        return ack()

    serve(handle, listen="0.0.0.0:50051")  # blocks; SIGTERM or Ctrl-C stops gracefully

Raising ``DeadLetter(reason)`` is the same as returning ``dead(reason)``; any other exception
is a RETRY with the exception's message as the reason. One server answers both ``Deliver`` and
``DeliverStream`` (many deliveries at once, answered as each finishes) and gRPC health checks.
For tests and embedding, the same server as an async context manager::

    async with ConsumerServer(handle, listen="127.0.0.1:0") as server:
        ...  # siding (or a test) reaches it at server.target

The same server answers ``DeliverBatches`` too, so a route with ``batch = { max = 64 }`` needs no
change here: each delivery of a batch goes to the handler on its own and gets its own answer.

Webhook consumers verify requests with ``verify_webhook`` (or the ``WebhookVerifier`` ASGI
middleware) instead; a batch request (``is_batch(content_type)``) is read with
``deliveries_from_batch`` and answered with ``batch_answer(await answer_batch(handle, ...))``.
"""

from siding.consumer.batch import (
    BatchEnvelopeError,
    answer_batch,
    batch_answer,
    deliveries_from_batch,
    is_batch,
)
from siding.consumer.reply import DeadLetter, Handler, Reply, ack, dead, retry
from siding.consumer.server import ConsumerServer, serve
from siding.consumer.webhook import WebhookVerificationError, WebhookVerifier, verify_webhook
from siding.model import Delivery

__all__ = [
    "BatchEnvelopeError",
    "ConsumerServer",
    "DeadLetter",
    "Delivery",
    "Handler",
    "Reply",
    "WebhookVerificationError",
    "WebhookVerifier",
    "ack",
    "answer_batch",
    "batch_answer",
    "dead",
    "deliveries_from_batch",
    "is_batch",
    "retry",
    "serve",
    "verify_webhook",
]
