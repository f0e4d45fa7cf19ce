"""What a consumer's handler answers: ``ack()``, ``retry(...)``, ``dead(...)`` or an exception."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from siding.errors import SidingError
from siding.model import Delivery, Result, Verdict


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer for one delivery; build it with ``ack``, ``retry`` or ``dead``."""

    verdict: Verdict
    retry_after_s: float | None = None
    reason: str = ""

    def to_result(self, delivery_id: str) -> Result:
        return Result(delivery_id, self.verdict, self.retry_after_s, self.reason)


Handler = Callable[[Delivery], Awaitable[Reply]]

log = logging.getLogger(__name__)


class DeadLetter(SidingError):
    """Raise from a handler to send the delivery to the dead-letter topic with this reason."""


def ack() -> Reply:
    """Done with this delivery."""
    return Reply(Verdict.ACK)


def retry(after_s: float | None = None, reason: str = "") -> Reply:
    """Not now: deliver again later (no earlier than ``after_s`` seconds from now, if given)."""
    if after_s is not None and not (math.isfinite(after_s) and after_s >= 0):
        raise ValueError(f"after_s must be a finite number of seconds >= 0, not {after_s!r}")
    return Reply(Verdict.RETRY, after_s, reason)


def dead(reason: str) -> Reply:
    """Never: this delivery goes to the dead-letter topic with ``reason``."""
    return Reply(Verdict.DEAD, None, reason)


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


async def handle(handler: Handler, delivery: Delivery) -> Result:
    """Run ``handler`` on one delivery and turn whatever it did into that delivery's Result."""
    try:
        reply = reply_for_return(await handler(delivery))
    except Exception as error:
        reply = reply_for_exception(error)
        if isinstance(error, DeadLetter):
            log.info("dead letter %s: %s", delivery.id, reply.reason)
        else:
            log.warning("handler raised for %s: %s", delivery.id, reply.reason, exc_info=error)
    return reply.to_result(delivery.id)
