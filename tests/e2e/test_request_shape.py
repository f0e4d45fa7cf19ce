"""A route that calls ``PUT /orders/{key}`` with a static header from the environment: the
consumer sees each record at its own URL, the header's value, a signature that verifies, and one
Idempotency-Key for a record across its retry and its redelivery from the retry lane."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web
from confluent_kafka import Producer

from siding.consumer.webhook import verify_webhook
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
KEYS = (b"order-1", b"order 2/b", b"retry-me")


@dataclass(frozen=True)
class Call:
    method: str
    raw_path: str
    api_key: str | None
    idempotency_key: str | None
    delivery_id: str  # what the signature vouches for
    attempt: int
    lane: int


def _consumer(loop: LoopThread, calls: list[Call]) -> tuple[str, Callable[[], None]]:
    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        headers = request.headers
        attempt = int(headers["siding-attempt"])
        calls.append(
            Call(
                request.method,
                request.raw_path,
                headers.get("X-Api-Key"),
                headers.get("Idempotency-Key"),
                verify_webhook(SECRET, headers, body),
                attempt,
                int(headers["siding-lane"]),
            )
        )
        if request.raw_path.endswith("/retry-me") and attempt == 1:
            return web.Response(status=500, text="once more")
        return web.Response(status=204)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    port = loop.run(start())
    return f"http://127.0.0.1:{port}", lambda: loop.run(runner.cleanup())


def test_a_route_puts_each_record_to_its_own_url_with_one_idempotency_key_across_retries(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given three orders, one of which the consumer refuses once (500)
    topic = topic_name("shape")
    ensure_topics(admin_client({"bootstrap.servers": kafka.bootstrap}), [TopicSpec(topic)])
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key in KEYS:
        producer.produce(topic, key=key, value=b'{"total": 5}')
    assert producer.flush(10) == 0
    calls: list[Call] = []
    base, stop = _consumer(loop_thread, calls)
    # and a route that PUTs to /orders/{key} with an API key taken from the environment
    monkeypatch.setenv("ORDERS_API_KEY", "k3y-from-env")
    route = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": base + "/orders/{key}",
        "deadline": "5s",
        "lanes": [{"delay": "300ms"}],
        "auth": {"webhook_secret": SECRET},
        "http": {"method": "PUT", "headers": {"X-Api-Key": "${ORDERS_API_KEY}"}},
    }
    # When the route runs
    try:
        run = PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "checkpoints", spark=spark
        )
        with run:
            run.wait_committed({0: len(KEYS)})
            wait_until(
                lambda: any(c.attempt == 2 for c in calls),
                timeout_s=60,
                what="the refused order redelivered from retry lane 1",
                check=run.check,
            )
    finally:
        stop()
    # Then every record was PUT to its own URL, the key escaped as one path segment
    by_path = {(c.raw_path, c.attempt): c for c in calls}
    assert set(by_path) == {
        ("/orders/order-1", 1),
        ("/orders/order%202%2Fb", 1),
        ("/orders/retry-me", 1),
        ("/orders/retry-me", 2),
    }
    assert {c.method for c in calls} == {"PUT"}
    # with the header's value from the environment, and an Idempotency-Key that is the id
    # the signature vouches for
    assert {c.api_key for c in calls} == {"k3y-from-env"}
    assert all(c.idempotency_key == c.delivery_id for c in calls)
    # and the refused record kept its key across its retry and its redelivery from lane 1
    first, again = by_path[("/orders/retry-me", 1)], by_path[("/orders/retry-me", 2)]
    assert (first.lane, again.lane) == (0, 1)
    assert first.idempotency_key == again.idempotency_key == f"{topic}/0/2"
    assert len({c.idempotency_key for c in calls}) == len(KEYS)
