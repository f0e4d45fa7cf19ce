"""What a consumer's handler answers; the code lives in the thin SDK (``siding_consumer.reply``)."""

from siding.model import Result
from siding_consumer.model import Delivery
from siding_consumer.reply import (
    DeadLetter,
    Handler,
    Reply,
    ack,
    backoff,
    call_handler,
    dead,
    reply_for_exception,
    reply_for_return,
    retry,
)

__all__ = [
    "DeadLetter",
    "Handler",
    "Reply",
    "ack",
    "backoff",
    "call_handler",
    "dead",
    "handle",
    "reply_for_exception",
    "reply_for_return",
    "retry",
]


async def handle(handler: Handler, delivery: Delivery) -> Result:
    """Run ``handler`` on one delivery and turn whatever it did into that delivery's Result."""
    reply = await call_handler(handler, delivery)
    return Result(delivery.id, reply.verdict, reply.retry_after_s, reply.reason)
