"""siding-consumer: answer the deliveries siding pushes, over gRPC or webhooks.

A consumer in ten lines::

    from siding_consumer import Delivery, Reply, ack, dead, retry, serve

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
is a RETRY with the exception's message as the reason; ``backoff()`` asks siding to slow down.
One server answers ``Deliver``, ``DeliverStream`` and ``DeliverBatches`` and gRPC health checks.
For tests and embedding, the same server as an async context manager::

    async with ConsumerServer(handle, listen="127.0.0.1:0") as server:
        ...  # siding (or a test) reaches it at server.target

To join a route of siding's (docs/registration.md) instead of being listed in its config::

    serve(handle, listen="0.0.0.0:50051",
          join=Join("http://siding:9464", "orders", token=os.environ["ORDERS_JOIN_TOKEN"]))

Webhook consumers run ``WebhookApp(handle, secret)`` under any ASGI server, or verify requests
themselves with ``verify_webhook`` (or the ``WebhookVerifier`` ASGI middleware).
"""

from siding_consumer.encoding import BodyEncodingError, decode_body
from siding_consumer.errors import ConfigError, SidingError
from siding_consumer.model import Delivery, Output, Verdict
from siding_consumer.registration import (
    Join,
    Registration,
    RegistrationError,
    RegistrationEvent,
)
from siding_consumer.reply import (
    DeadLetter,
    Handler,
    Reply,
    ack,
    backoff,
    current_call,
    dead,
    retry,
)
from siding_consumer.server import ConsumerServer, serve
from siding_consumer.webhook import (
    WebhookApp,
    WebhookVerificationError,
    WebhookVerifier,
    verify_webhook,
)

__all__ = [
    "BodyEncodingError",
    "ConfigError",
    "ConsumerServer",
    "DeadLetter",
    "Delivery",
    "Handler",
    "Join",
    "Output",
    "Registration",
    "RegistrationError",
    "RegistrationEvent",
    "Reply",
    "SidingError",
    "Verdict",
    "WebhookApp",
    "WebhookVerificationError",
    "WebhookVerifier",
    "ack",
    "backoff",
    "current_call",
    "dead",
    "decode_body",
    "retry",
    "serve",
    "verify_webhook",
]
