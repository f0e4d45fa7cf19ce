"""For webhook consumers of a batched route: read siding's batch envelope and answer it per
delivery (docs/batch.md). The code lives in the thin SDK (``siding_consumer.envelope``, and
``siding_consumer.WebhookApp`` does all of it); these names are kept for existing users.

    if is_batch(request.headers.get("content-type")):
        deliveries = deliveries_from_batch(raw_body)
        results = await answer_batch(handle, deliveries)
        return 200, {"content-type": "application/json"}, batch_answer(results)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from siding.consumer.reply import Handler, Reply, handle
from siding.model import Delivery, Result
from siding_consumer import envelope
from siding_consumer.envelope import (
    BATCH_CONTENT_TYPE,
    deliveries_from_batch,
    delivery_from_event,
    is_batch,
)
from siding_consumer.envelope import EnvelopeError as BatchEnvelopeError

ANSWER_CONTENT_TYPE = "application/json"

__all__ = [
    "ANSWER_CONTENT_TYPE",
    "BATCH_CONTENT_TYPE",
    "BatchEnvelopeError",
    "answer_batch",
    "batch_answer",
    "deliveries_from_batch",
    "delivery_from_event",
    "is_batch",
]


def batch_answer(results: Iterable[Result]) -> bytes:
    """The JSON body that answers a batch: one result per delivery (``{"results": [...]}``)."""
    replies = ((r.delivery_id, Reply(r.verdict, r.retry_after_s, r.reason)) for r in results)
    return envelope.batch_answer(replies).body


async def answer_batch(handler: Handler, deliveries: Sequence[Delivery]) -> list[Result]:
    """Run ``handler`` on every delivery of a batch at once; a result for each, in order."""
    return list(await asyncio.gather(*(handle(handler, d) for d in deliveries)))
