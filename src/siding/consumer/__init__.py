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

Webhook consumers verify requests with ``verify_webhook`` (or the ``WebhookVerifier`` ASGI
middleware) instead.
"""

from siding.consumer.reply import DeadLetter, Handler, Reply, ack, dead, retry
from siding.consumer.server import ConsumerServer, serve
from siding.consumer.webhook import WebhookVerificationError, WebhookVerifier, verify_webhook
from siding.model import Delivery

__all__ = [
    "ConsumerServer",
    "DeadLetter",
    "Delivery",
    "Handler",
    "Reply",
    "WebhookVerificationError",
    "WebhookVerifier",
    "ack",
    "dead",
    "retry",
    "serve",
    "verify_webhook",
]
