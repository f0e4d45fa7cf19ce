"""What a consumer's handler answers: ``ack()``, ``retry(...)``, ``dead(...)``, ``backoff(...)``
or an exception."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass

from siding_consumer.errors import SidingError
from siding_consumer.model import Delivery, Output, Verdict

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer for one delivery; build it with ``ack``, ``retry``, ``dead`` or
    ``backoff``.

    ``backoff`` is a RETRY that says "the message is fine, I am not": over a unary call it is
    answered with the gRPC status RESOURCE_EXHAUSTED (siding redelivers in place, slows down and
    spends no attempt); a stream or batch has no per-delivery status, so there it is a RETRY.
    """

    verdict: Verdict
    retry_after_s: float | None = None
    reason: str = ""
    outputs: tuple[Output, ...] = ()
    backoff: bool = False


Handler = Callable[[Delivery], Awaitable[Reply]]

# How the delivery being handled arrived; set by the server and the webhook app.
CALL: ContextVar[str] = ContextVar("siding_consumer_call", default="")


def current_call() -> str:
    """How the delivery being handled arrived: ``Deliver``, ``DeliverStream``,
    ``DeliverBatches``, ``webhook`` or ``webhook-batch`` (empty outside a handler); for metrics
    and logs."""
    return CALL.get()


class DeadLetter(SidingError):
    """Raise from a handler to send the delivery to the dead-letter topic with this reason."""


def ack(outputs: Iterable[Output] = ()) -> Reply:
    """Done with this delivery; siding writes ``outputs`` (if any) to Kafka first."""
    return Reply(Verdict.ACK, outputs=tuple(outputs))


def _check_after(after_s: float | None) -> None:
    if after_s is not None and not (math.isfinite(after_s) and after_s >= 0):
        raise ValueError(f"after_s must be a finite number of seconds >= 0, not {after_s!r}")


def retry(after_s: float | None = None, reason: str = "") -> Reply:
    """Not now: deliver again later, from the next retry lane (no earlier than ``after_s``
    seconds from now, if given; else after the lane's delay)."""
    _check_after(after_s)
    return Reply(Verdict.RETRY, after_s, reason)


def dead(reason: str) -> Reply:
    """Never: this delivery goes to the dead-letter topic with ``reason``."""
    return Reply(Verdict.DEAD, None, reason)


def backoff(after_s: float | None = None, reason: str = "") -> Reply:
    """I am overloaded or a dependency is down, the message is fine: try again later, in place
    where the transport can say so (unary gRPC), and slow down."""
    _check_after(after_s)
    return Reply(Verdict.RETRY, after_s, reason or "consumer asked to back off", backoff=True)


def reply_for_exception(error: Exception) -> Reply:
    """``DeadLetter`` means DEAD; any other exception is taken as transient: RETRY."""
    text = str(error) or type(error).__name__
    if isinstance(error, DeadLetter):
        return dead(text)
    return retry(reason=text)


def reply_for_return(value: object) -> Reply:
    """What a handler returned; anything but a ``Reply`` is a handler bug, so RETRY (never ack
    by accident)."""
    if isinstance(value, Reply):
        return value
    return retry(reason=f"handler returned {type(value).__name__}, not a Reply")


async def call_handler(handler: Handler, delivery: Delivery) -> Reply:
    """The handler's reply for ``delivery``, exceptions and wrong returns included (logged)."""
    try:
        return reply_for_return(await handler(delivery))
    except Exception as error:
        reply = reply_for_exception(error)
        if isinstance(error, DeadLetter):
            log.info("dead letter %s: %s", delivery.id, reply.reason)
        else:
            log.warning("handler raised for %s: %s", delivery.id, reply.reason, exc_info=error)
        return reply
