"""The README's example: a consumer service in ten lines (``python hello.py``)."""

import json

from siding_consumer import Delivery, Reply, ack, dead, retry, serve


async def charge(_delivery_id: str, _order: object) -> bool:
    return True  # your work here; deduplicate on the delivery id


async def handle(d: Delivery) -> Reply:
    try:
        order = json.loads(d.value or b"")
    except ValueError:
        return dead("not JSON")  # straight to the dead-letter topic, never retried
    if not await charge(d.id, order):
        return retry(after_s=30, reason="payment provider busy")
    return ack()


if __name__ == "__main__":
    serve(handle, listen="0.0.0.0:50051")  # gRPC + health; SIGTERM or Ctrl-C stops gracefully
