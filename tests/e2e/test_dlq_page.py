"""A page for every dead letter (issue 30 item 5, docs/dlq.md): a real `siding run` in-process
(embedded broker, Spark local, one start), the Python SDK's gRPC consumer answering DEAD for
the pills, and a real HTTP server taking the pages.

The notifier first holds the route's first page open (then answers 503): meanwhile the route
keeps delivering, dead-lettering and committing two rounds of traffic. Once it answers, that
page is dropped and counted, and the next page holds exactly the second round's letters, each
with its story and its place in the DLQ, signed so that the SDK's verifier accepts it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

from siding import naming
from siding.config import parse_config
from siding.control.runner import SidingRun
from siding.devkit.broker import EmbeddedKafka, free_port
from siding.devkit.sim_produce import new_producer
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, committed_offsets, ensure_topics
from siding.kafka.reader import read_records
from siding.routing import story
from siding_consumer import ConsumerServer, Delivery, Reply, ack, dead, verify_webhook
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SECRET = "whsec_ZTJlLWRscS1wYWdlLXNlY3JldA=="
GOOD = 12


class Services:
    """The consumer (DEAD for a value starting with ``pill``) and the notifier, on one loop."""

    def __init__(self) -> None:
        self.pages: list[tuple[dict[str, str], bytes]] = []
        self.first_page = threading.Event()
        self._release: asyncio.Event | None = None
        self._loops = LoopThread()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._serving: Future[None] | None = None
        self.target = ""
        self.url = ""

    async def handle(self, d: Delivery) -> Reply:
        return dead(f"pill {d.id}") if (d.value or b"").startswith(b"pill") else ack()

    async def page(self, request: web.Request) -> web.Response:
        self.pages.append((dict(request.headers), await request.read()))
        if len(self.pages) == 1:  # the notifier is "down": it hangs, then fails
            self.first_page.set()
            assert self._release is not None
            await self._release.wait()
            return web.Response(status=503)
        return web.Response(status=204)

    async def _serve(self) -> None:
        self._release, self._stop = asyncio.Event(), asyncio.Event()
        app = web.Application()
        app.router.add_post("/pages", self.page)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/pages"
        try:
            async with ConsumerServer(self.handle, "127.0.0.1:0", grace_s=1) as server:
                self.target = server.target
                self._ready.set()
                await self._stop.wait()
        finally:
            self._release.set()
            await runner.cleanup()

    def release(self) -> None:
        assert self._release is not None
        self._loops.loop.call_soon_threadsafe(self._release.set)

    def __enter__(self) -> Services:
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(), self._loops.loop)
        assert self._ready.wait(30), "the consumer and notifier did not start"
        return self

    def __exit__(self, *_: object) -> None:
        if self._stop is not None:
            self._loops.loop.call_soon_threadsafe(self._stop.set)
        if self._serving is not None:
            self._serving.result(30)
        self._loops.close()


@pytest.fixture
def services() -> Iterator[Services]:
    with Services() as running:
        yield running


class Running(SidingRun):
    failed: BaseException | None = None

    def check(self) -> None:
        if self.failed is not None:
            raise AssertionError(f"siding stopped: {self.failed}") from self.failed

    def run_here(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self.failed = exc


def _produce(bootstrap: str, topic: str, first: int, pills: int) -> list[int]:
    """``GOOD`` orders and ``pills`` pills among them (from seq ``first``); the pills' offsets."""
    producer, failed = new_producer(bootstrap), []
    values = [b"order %d" % n for n in range(GOOD)]
    for n in range(pills):
        values.insert(2 + n * 3, b"pill %d" % (first + n))
    for value in values:
        producer.produce(
            topic, value=value, partition=0, on_delivery=lambda e, _m: failed.append(e) if e else 0
        )
    assert producer.flush(30) == 0
    assert failed == []
    return [first + i for i, v in enumerate(values) if v.startswith(b"pill")]


def _metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_dead_letters_are_paged_once_written_and_a_notifier_that_is_down_holds_up_nothing(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    services: Services,
) -> None:
    source, port = topic_name("orders"), free_port()
    route = source[-80:]
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(client), [TopicSpec(source)])
    first_pills = _produce(kafka.bootstrap, source, 0, 2)
    config = parse_config(f"""
[kafka]
bootstrap = "{kafka.bootstrap}"
[spark]
master = "local[2]"
checkpoint_dir = "{tmp_path / "ckpt"}"
trigger = "100ms"
[control]
listen = "127.0.0.1:{port}"
[[route]]
name = "{route}"
topic = "{source}"
group = "{source}-g"
endpoint = "grpc://{services.target}"
dlq_flood_min_batch = 1000000
[route.dlq_page]
url = "{services.url}"
secret = "{SECRET}"
every = "1s"
max_letters = 10
timeout = "60s"
""")
    siding = Running(config, spark=spark)
    siding.start()
    threading.Thread(target=siding.run_here, daemon=True).start()
    try:

        def committed(offset: int) -> bool:
            return committed_offsets(client, f"{source}-g", source).get(0, 0) >= offset

        # Given the notifier holds the route's first page open
        assert services.first_page.wait(180), "no page came"
        # When the route goes on: its first round and a second one are delivered and committed
        wait_until(lambda: committed(GOOD + 2), timeout_s=60, what="round 1", check=siding.check)
        second_pills = _produce(kafka.bootstrap, source, GOOD + 2, 3)
        end = 2 * GOOD + 5
        wait_until(lambda: committed(end), timeout_s=60, what="round 2", check=siding.check)
        # Then every pill is in the DLQ, while the first page still hangs
        letters = read_records(client, naming.route_dlq(config.route[0]))
        told = {r.offset: story.decode(r.headers) for r in letters}
        assert sorted(t.origin.offset for t in told.values() if t) == first_pills + second_pills
        assert len(services.pages) == 1
        # And once the notifier answers (503), that page is dropped and the next one goes
        services.release()
        url, sent = str(siding.url), f'siding_dlq_pages_sent_total{{route="{route}"}} 1.0'
        wait_until(
            lambda: sent in _metrics(url),
            timeout_s=30,
            what="the second page",
            check=siding.check,
        )
        text = _metrics(url)
        assert f'siding_dlq_pages_dropped_total{{route="{route}"}} 1.0' in text
        assert f'siding_dlq_page_letters_total{{result="dropped",route="{route}"}} 2.0' in text
        assert len(services.pages) == 2
    finally:
        siding.stop()
    # The dropped page had told of the first round's pills
    dropped = json.loads(services.pages[0][1])["data"]
    assert sorted(x["offset"] for x in dropped["letters"]) == first_pills
    # The page that was sent holds exactly the second round's letters, signed
    headers, body = services.pages[1]
    headers = {name.lower(): value for name, value in headers.items()}
    page_id = verify_webhook(SECRET, headers, body)
    event = json.loads(body)
    assert page_id == event["id"]
    assert headers["content-type"] == "application/cloudevents+json"
    assert (event["type"], event["source"]) == ("dev.siding.dlq.page", f"/siding/routes/{route}")
    data = event["data"]
    assert (data["route"], data["count"], data["listed"]) == (route, 3, 3)
    dlq = naming.route_dlq(config.route[0])
    where = {t.origin.offset: offset for offset, t in told.items() if t}
    notes = sorted(data["letters"], key=lambda x: int(x["offset"]))
    for note, offset in zip(notes, second_pills, strict=True):
        assert note["id"] == f"{source}/0/{offset}"
        assert (note["topic"], note["partition"], note["offset"]) == (source, 0, offset)
        assert note["reason"] == f"pill {source}/0/{offset}"
        assert (note["class"], note["attempt"], note["lane"]) == ("consumer said dead", 1, 0)
        assert note["dlq"] == {"topic": dlq, "partition": 0, "offset": where[offset]}
