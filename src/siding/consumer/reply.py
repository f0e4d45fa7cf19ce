"""What a consumer's handler answers; the code lives in the thin SDK (``siding_consumer.reply``)."""

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
    "reply_for_exception",
    "reply_for_return",
    "retry",
]
