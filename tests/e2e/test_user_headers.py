"""A producer's own ``siding.*`` headers reach the consumer unchanged, on the main lane, in a retry
lane and in the DLQ, over gRPC and HTTP, while siding's own story still steers each record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web
from confluent_kafka import Producer

from siding import naming
from siding.consumer import ConsumerServer, Reply, ack, dead, retry
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.model import Delivery
from siding.routing import story
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A not-before far in the future: taken for the story's, lane 1 would put the record back forever.
PRODUCED = (
    ("siding.lane", b"7"),
    ("siding.id", b"mine"),
    ("siding.not-before", b"99999999999999"),
    ("app", b"x"),
)
KEYS = (b"ack", b"retry", b"dead")


@dataclass(frozen=True)
class Seen:
    key: str
    attempt: int
    lane: int
    headers: tuple[tuple[str, str], ...]


def _text(headers: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), v.decode() if isinstance(v, bytes) else str(v)) for k, v in headers)


def _grpc_consumer(loop: LoopThread, seen: list[Seen]) -> tuple[str, Callable[[], None]]:
    async def handle(d: Delivery) -> Reply:
        key = (d.key or b"").decode()
        seen.append(Seen(key, d.attempt, d.lane, _text(d.headers)))
        if key == "dead":
            return dead("dead on purpose")
        if key == "retry" and d.attempt == 1:
            return retry(reason="once more")
        return ack()

    server = ConsumerServer(handle)
    loop.run(server.start())
    return f"grpc://{server.target}", lambda: loop.run(server.stop(0))


def _http_consumer(loop: LoopThread, seen: list[Seen]) -> tuple[str, Callable[[], None]]:
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        key = request.headers.get("ce-subject", "")
        attempt = int(request.headers["siding-attempt"])
        seen.append(
            Seen(key, attempt, int(request.headers["siding-lane"]), _text(request.headers.items()))
        )
        if key == "dead":
            return web.Response(status=422, text="dead on purpose")
        if key == "retry" and attempt == 1:
            return web.Response(status=500, text="once more")
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    port = loop.run(start())
    return f"http://127.0.0.1:{port}/hook", lambda: loop.run(runner.cleanup())


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_producers_siding_headers_reach_the_consumer_unchanged_in_every_lane(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
    transport: str,
) -> None:
    # Given three records carrying the producer's own siding.* headers: one acked, one retried
    # once, one dead
    topic = topic_name(f"uh-{transport}")
    ensure_topics(admin_client({"bootstrap.servers": kafka.bootstrap}), [TopicSpec(topic)])
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key in KEYS:
        producer.produce(topic, key=key, value=b"v", headers=list(PRODUCED))
    assert producer.flush(10) == 0
    seen: list[Seen] = []
    start = _grpc_consumer if transport == "grpc" else _http_consumer
    endpoint, stop = start(loop_thread, seen)
    route = {
        "name": topic.replace("_", "-")[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": endpoint,
        "deadline": "5s",
        "lanes": [{"delay": "300ms"}],
        "dlq_flood_min_batch": 1_000_000,
    }
    # When the route runs
    try:
        run = PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "checkpoints", spark=spark
        )
        with run:
            run.wait_committed({0: len(KEYS)})
            wait_until(
                lambda: any(s.key == "retry" and s.attempt == 2 for s in seen),
                timeout_s=60,
                what="the retried record delivered from lane 1",
                check=run.check,
            )
            letters = wait_until(run.dead_letters, what="the dead letter", check=run.check)
    finally:
        stop()
    # Then every delivery carried the producer's headers unchanged, beside siding's own lane
    produced = _text(PRODUCED)
    by_attempt = {(s.key, s.attempt): s for s in seen}
    assert set(by_attempt) == {("ack", 1), ("retry", 1), ("retry", 2), ("dead", 1)}
    for s in by_attempt.values():
        forwarded = tuple(h for h in s.headers if h[0] in {n for n, _ in produced})
        assert forwarded == produced, s
    assert by_attempt[("retry", 2)].lane == 1 and by_attempt[("retry", 1)].lane == 0
    # And the dead letter keeps them as the producer's, its story intact
    assert len(letters) == 1
    told = letters[0].story
    assert told is not None
    assert (told.origin.topic, told.origin.offset, told.lane) == (topic, 2, 0)
    assert told.reason == (
        "dead on purpose" if transport == "grpc" else "http 422: dead on purpose"
    )
    assert story.user_headers(letters[0].headers) == PRODUCED
    lane_records = run.read_lane_topic(naming.lane_topic(run.route.name, 1))
    assert [r.story.origin.offset for r in lane_records if r.story] == [1]
