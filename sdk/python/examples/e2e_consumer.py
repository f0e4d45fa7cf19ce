"""The end-to-end consumer (tests/e2e/test_sdks.py): serves gRPC, answers by the record's key and
writes one JSON line per delivery to --record (with the call it came by: DeliverStream,
DeliverBatches, ...).

    key "dead"  -> dead("dead on purpose")
    key "retry" -> retry on attempt 1, ack from attempt 2
    any other   -> ack
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from siding_consumer import (
    ConsumerServer,
    Delivery,
    Handler,
    Reply,
    ack,
    current_call,
    dead,
    retry,
)
from siding_consumer.server import until_signalled


def answer(d: Delivery) -> Reply:
    if d.key == b"dead":
        return dead("dead on purpose")
    if d.key == b"retry" and d.attempt == 1:
        return retry(reason="retry once")
    return ack()


def handler(record: Path) -> Handler:
    out = record.open("a", buffering=1)  # a line at a time: the test reads while we run

    async def handle(d: Delivery) -> Reply:
        reply = answer(d)
        line = {
            "transport": "grpc",
            "call": current_call(),
            "id": d.id,
            "key": (d.key or b"").decode(errors="replace"),
            "attempt": d.attempt,
            "lane": d.lane,
            "value_hex": (d.value or b"").hex(),
            "verdict": reply.verdict.value,
        }
        out.write(json.dumps(line) + "\n")
        return reply

    return handle


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--grpc", required=True, help="serve gRPC on host:port")
    parser.add_argument("--record", type=Path, required=True)
    args = parser.parse_args()
    async with ConsumerServer(handler(args.record), args.grpc, grace_s=5):
        await until_signalled()


if __name__ == "__main__":
    asyncio.run(main())
