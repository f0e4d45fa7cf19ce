"""Compression on the wire end to end (route.compression, docs/configuration.md): one siding run,
a gRPC route to the Python SDK's server behind a byte-counting relay and an HTTP route to a
webhook consumer, both with gzip on. Each consumer gets every record once, decoded, and what
crossed the wire was compressed: fewer bytes than the values themselves."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from confluent_kafka import Producer

from siding.config import parse_config
from siding.consumer import ConsumerServer, Delivery, Reply, ack, verify_webhook
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.wait import wait_until
from siding.devkit.wire_relay import WireRelay
from siding.kafka.admin import TopicSpec, admin_client, committed_offsets, ensure_topics
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SECRET = "whsec_" + base64.b64encode(b"compression-e2e-secret-0123456").decode()
COUNT = 12
SMALL = b'{"order": 7}'  # under compress_above: goes as it is


def order(n: int) -> bytes:
    """A 4 KiB JSON value, as compressible as real order records are."""
    items = [{"sku": f"SKU-{n:04d}-{i:03d}", "qty": 1 + i % 3, "price": "19.99"} for i in range(60)]
    text = json.dumps({"order": n, "currency": "EUR", "items": items})
    return text.encode()[:4000].ljust(4096, b" ")


VALUES = [order(n) for n in range(COUNT - 1)] + [SMALL]


@dataclass
class Seen:
    values: Counter[bytes] = field(default_factory=Counter)
    ids: Counter[str] = field(default_factory=Counter)
    # HTTP only: (content-encoding, bytes on the wire, bytes decoded) per request.
    requests: list[tuple[str | None, int, int]] = field(default_factory=list)

    async def handle(self, d: Delivery) -> Reply:
        self.values[d.value or b""] += 1
        self.ids[d.id] += 1
        return ack()


def grpc_consumer(loop: LoopThread, seen: Seen) -> tuple[str, WireRelay, Callable[[], None]]:
    server = ConsumerServer(seen.handle, listen="127.0.0.1:0")

    async def start() -> WireRelay:
        await server.start()
        return await WireRelay(server.target).start()

    relay: WireRelay = loop.run(start())

    async def stop() -> None:
        await relay.stop()
        await server.stop(0)

    return f"grpc://{relay.target}", relay, lambda: loop.run(stop())


def http_consumer(loop: LoopThread, seen: Seen) -> tuple[str, Callable[[], None]]:
    async def hook(request: web.Request) -> web.Response:
        body = await request.read()  # aiohttp's server decodes the gzip body
        verify_webhook(SECRET, dict(request.headers), body)  # signed before compressing
        encoding = request.headers.get("content-encoding")
        seen.requests.append((encoding, request.content_length or 0, len(body)))
        await seen.handle(Delivery(request.headers["webhook-id"], "", 0, 0, None, body))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    port = loop.run(start())
    return f"http://127.0.0.1:{port}/hook", lambda: loop.run(runner.cleanup())


def test_both_transports_send_gzip_and_every_record_is_acked_once(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
) -> None:
    # Given a topic per transport with eleven 4 KiB JSON records and one small one
    topics = {"grpc": topic_name("zg"), "http": topic_name("zh")}
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(client), [TopicSpec(t) for t in topics.values()])
    producer = Producer(client)
    for topic in topics.values():
        for value in VALUES:
            producer.produce(topic, value=value)
    assert producer.flush(10) == 0
    seen = {"grpc": Seen(), "http": Seen()}
    grpc_url, relay, stop_grpc = grpc_consumer(loop_thread, seen["grpc"])
    http_url, stop_http = http_consumer(loop_thread, seen["http"])
    routes = []
    for kind, url in (("grpc", grpc_url), ("http", http_url)):
        table: dict[str, object] = {
            "name": f"zip-{kind}",
            "topic": topics[kind],
            "group": f"{topics[kind]}-group",
            "endpoint": url,
            "compression": "gzip",
            "compress_above": 1024,
        }
        if kind == "http":
            table["auth"] = {"webhook_secret": SECRET}
        routes.append(config_text(kafka.bootstrap, table, checkpoint_dir=tmp_path / "cp"))
    config = parse_config(routes[0] + "[[route]]" + routes[1].split("[[route]]", 1)[1])

    # When siding runs both routes with gzip on
    try:
        with PipelineRun(config, spark) as run:

            def all_committed() -> bool:
                return all(
                    committed_offsets(run.client_conf, r.group, r.source_topics[0]).get(0) == COUNT
                    for r in config.routes
                )

            wait_until(all_committed, timeout_s=120, what="both routes committed", check=run.check)
            up = relay.count.up
    finally:
        stop_grpc()
        stop_http()

    # Then each consumer got every record once, decoded to the bytes produced
    for kind, got in seen.items():
        assert got.values == Counter(VALUES), kind
        assert set(got.ids.values()) == {1}, (kind, got.ids)
    # And what reached the gRPC consumer was compressed: fewer bytes on the wire than the values
    # alone (every call's framing, headers and health probes included)
    assert up < sum(map(len, VALUES)) / 2, up
    # And each large webhook body went gzipped and smaller; the small one as it was
    big = [r for r in seen["http"].requests if r[2] == 4096]
    assert len(big) == COUNT - 1
    assert all(encoding == "gzip" and 0 < wire < 4096 / 2 for encoding, wire, _ in big), big
    [small] = [r for r in seen["http"].requests if r[2] == len(SMALL)]
    assert small == (None, len(SMALL), len(SMALL))
