"""Batched delivery end to end (docs/batch.md): one siding run, a batched gRPC route and a batched
HTTP route on the embedded broker. Each record keeps its own fate inside its batch: acks, a RETRY
that goes through lane 1, a DEAD that reaches the DLQ alone, a binary value byte for byte. A third
route, with the defaults, meets a gRPC consumer that serves only ``DeliverStream``: batching is
asked once per connection, then every record goes one per message, none lost or doubled. A
fourth, an HTTP route with the defaults, meets a webhook consumer that says it reads batches
(``siding-batch: v1``) and streams their results: its first record goes alone, the later ones in
batches, each settled as its line comes."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import grpc.aio
from aiohttp import web
from confluent_kafka import Producer

from siding import naming
from siding.config import parse_config
from siding.consumer import (
    Reply,
    ack,
    answer_batch,
    batch_answer,
    dead,
    deliveries_from_batch,
    is_batch,
    retry,
    verify_webhook,
)
from siding.consumer.reply import handle
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import DeadLetter, PipelineRun, config_text
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, committed_offsets, ensure_topics
from siding.model import Delivery
from siding.transport.grpc_common import delivery_from_proto, result_to_proto
from siding.v1 import consumer_pb2, consumer_pb2_grpc
from siding_consumer.envelope import (
    RESULT_STREAM_TYPE,
    accepts_result_stream,
    delivery_from_request,
    result_line,
    single_answer,
)
from siding_consumer.reply import call_handler
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SECRET = "whsec_" + base64.b64encode(b"batched-e2e-secret-0123456789ab").decode()
ODD = bytes(range(256)) * 3  # every byte value, NUL and 0xff included
# 20 records: the retried and the dead one share their batches with plain acks.
KEYS = [f"ack-{n}".encode() for n in range(18)]
KEYS[5], KEYS[9] = b"retry", b"dead"
KEYS += [b"binary", b"ack-last"]
VALUES = {b"binary": ODD, b"retry": ODD[::-1]}
Context = grpc.aio.ServicerContext[object, object]
SAYS = {"siding-batch": "v1"}


@dataclass
class Seen:
    """What one consumer received: every delivery, and the size of each frame or request."""

    deliveries: list[Delivery] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    streamed: int = 0  # batches answered as a stream of results
    singles: int = 0  # single webhooks (an HTTP route that offers batches, before it may)

    async def handle(self, d: Delivery) -> Reply:
        self.deliveries.append(d)
        if d.key == b"dead":
            return dead("dead on purpose")
        if d.key == b"retry" and d.attempt == 1:
            return retry(reason="once more")
        return ack()


class BatchesOnly(consumer_pb2_grpc.ConsumerServicer):
    """A consumer that serves DeliverBatches only (so a fallback to DeliverStream would fail the
    test), answering each delivery through the Python SDK's handler rules."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    async def Deliver(
        self,
        request: consumer_pb2.Delivery,  # noqa: ARG002
        context: Context,
    ) -> consumer_pb2.Result:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "batches only")

    async def DeliverStream(
        self,
        request_iterator: AsyncIterator[consumer_pb2.Delivery],  # noqa: ARG002
        context: Context,
    ) -> AsyncIterator[consumer_pb2.Result]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "batches only")
        yield consumer_pb2.Result()

    async def DeliverBatches(
        self,
        request_iterator: AsyncIterator[consumer_pb2.DeliveryBatch],
        context: Context,  # noqa: ARG002
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        async for frame in request_iterator:
            self.seen.batches.append(len(frame.deliveries))
            deliveries = [delivery_from_proto(d) for d in frame.deliveries]
            results = await asyncio.gather(*(handle(self.seen.handle, d) for d in deliveries))
            yield consumer_pb2.ResultBatch(results=[result_to_proto(r) for r in results])


class StreamOnly(consumer_pb2_grpc.ConsumerServicer):
    """A consumer written before ``DeliverBatches``: it serves ``DeliverStream`` and answers
    ``DeliverBatches`` as the generated code does for a method it does not implement. Notes the
    connection (peer) of each call."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
        self.batch_asks: list[str] = []
        self.stream_peers: list[str] = []

    async def Deliver(
        self,
        request: consumer_pb2.Delivery,  # noqa: ARG002
        context: Context,
    ) -> consumer_pb2.Result:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")

    async def DeliverStream(
        self, request_iterator: AsyncIterator[consumer_pb2.Delivery], context: Context
    ) -> AsyncIterator[consumer_pb2.Result]:
        self.stream_peers.append(context.peer())
        async for message in request_iterator:
            self.seen.batches.append(1)
            result = await handle(self.seen.handle, delivery_from_proto(message))
            yield result_to_proto(result)

    async def DeliverBatches(
        self,
        request_iterator: AsyncIterator[consumer_pb2.DeliveryBatch],  # noqa: ARG002
        context: Context,
    ) -> AsyncIterator[consumer_pb2.ResultBatch]:
        self.batch_asks.append(context.peer())
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        yield consumer_pb2.ResultBatch()


def grpc_consumer(
    loop: LoopThread, seen: Seen, servicer: consumer_pb2_grpc.ConsumerServicer | None = None
) -> tuple[str, Callable[[], None]]:
    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        consumer_pb2_grpc.add_ConsumerServicer_to_server(servicer or BatchesOnly(seen), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = loop.run(start())
    return f"grpc://127.0.0.1:{port}", lambda: loop.run(server.stop(0))


def http_consumer(
    loop: LoopThread, seen: Seen, *, says: bool = False
) -> tuple[str, Callable[[], None]]:
    """A webhook consumer of batches only; ``says``: of single webhooks too, saying
    ``siding-batch: v1`` on each answer and streaming a batch's results when asked, as the
    SDKs' webhook servers do."""

    async def hook(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        verify_webhook(SECRET, dict(request.headers), body)
        headers = dict(request.headers)
        if not is_batch(request.headers.get("content-type")):
            if not says:
                return web.Response(status=400, text="batches only")
            seen.singles += 1
            answer = single_answer(
                await call_handler(seen.handle, delivery_from_request(headers, body))
            )
            return web.Response(
                status=answer.status, body=answer.body, headers={**dict(answer.headers), **SAYS}
            )
        deliveries = deliveries_from_batch(body)
        seen.batches.append(len(deliveries))
        if says and accepts_result_stream(headers):
            seen.streamed += 1
            response = web.StreamResponse(headers={"content-type": RESULT_STREAM_TYPE, **SAYS})
            await response.prepare(request)

            async def one(d: Delivery) -> bytes:
                return result_line(d.id, await call_handler(seen.handle, d))

            for line in asyncio.as_completed([one(d) for d in deliveries]):
                await response.write(await line)
            await response.write_eof()
            return response
        results = batch_answer(await answer_batch(seen.handle, deliveries))
        return web.Response(body=results, content_type="application/json")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    port = loop.run(start())
    return f"http://127.0.0.1:{port}/hook", lambda: loop.run(runner.cleanup())


def route(name: str, topic: str, endpoint: str, *, batch: bool = True) -> dict[str, object]:
    table: dict[str, object] = {
        "name": name,
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": endpoint,
        "deadline": "5s",
        "lanes": [{"delay": "300ms"}],
        "dlq_flood_min_batch": 1_000_000,
    }
    if batch:
        table["batch"] = {"max": 8, "linger": "20ms"}
    if endpoint.startswith("http"):
        table["auth"] = {"webhook_secret": SECRET}
    return table


def test_each_record_of_a_batch_keeps_its_own_fate_over_grpc_and_http(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
) -> None:
    # Given four topics of 20 records each (the last only its first record yet), a batched gRPC
    # route, a batched HTTP route, a gRPC route with the defaults to a consumer that serves
    # only DeliverStream, and an HTTP route with the defaults to a consumer that says it
    # reads batches
    kinds = {"grpc": "bg", "http": "bh", "stream": "bs", "offered": "bo"}
    topics = {kind: topic_name(short) for kind, short in kinds.items()}
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(client), [TopicSpec(t) for t in topics.values()])
    producer = Producer(client)

    def produce(topic: str, keys: list[bytes]) -> None:
        for key in keys:
            producer.produce(topic, key=key, value=VALUES.get(key, b"plain"))
        assert producer.flush(10) == 0

    for kind, topic in topics.items():
        produce(topic, KEYS[:1] if kind == "offered" else KEYS)
    seen = {kind: Seen() for kind in topics}
    old_consumer = StreamOnly(seen["stream"])
    endpoints = {
        "grpc": grpc_consumer(loop_thread, seen["grpc"]),
        "http": http_consumer(loop_thread, seen["http"]),
        "stream": grpc_consumer(loop_thread, seen["stream"], old_consumer),
        "offered": http_consumer(loop_thread, seen["offered"], says=True),
    }
    routes = [
        route(f"batched-{kind}", topics[kind], endpoints[kind][0], batch=kind in {"grpc", "http"})
        for kind in topics
    ]
    first, *others = (
        config_text(kafka.bootstrap, r, checkpoint_dir=tmp_path / "checkpoints") for r in routes
    )
    config = parse_config(first + "".join("[[route]]" + o.split("[[route]]", 1)[1] for o in others))

    # When siding runs both routes
    try:
        with PipelineRun(config, spark) as run:
            # (the rest of the offered route's records once a worker has heard its consumer
            # say it: each Spark Python worker learns it from its own first answer)
            warm = warm_up(seen["offered"], lambda keys: produce(topics["offered"], keys), run)
            produce(topics["offered"], KEYS[1:])
            expected = {r.name: len(KEYS) for r in config.routes}
            expected[config.routes[-1].name] += len(warm)

            def all_committed() -> bool:
                return all(
                    committed_offsets(run.client_conf, r.group, r.source_topics[0]).get(0)
                    == expected[r.name]
                    for r in config.routes
                )

            def retried() -> bool:
                return all(
                    any(d.key == b"retry" and d.attempt == 2 for d in s.deliveries)
                    for s in seen.values()
                )

            def dead_letters() -> dict[str, list[DeadLetter]]:
                found = {r.name: run.read_lane_topic(naming.route_dlq(r)) for r in config.routes}
                return found if all(found.values()) else {}

            wait_until(all_committed, timeout_s=120, what="both routes committed", check=run.check)
            wait_until(retried, timeout_s=60, what="both retries from lane 1", check=run.check)
            letters = wait_until(dead_letters, what="both dead letters", check=run.check)
            lanes = {
                r.name: run.read_lane_topic(naming.lane_topic(r.name, 1)) for r in config.routes
            }
    finally:
        for _, stop in endpoints.values():
            stop()

    # Then the consumer without DeliverBatches was asked for it at most once per transport of
    # a worker (its main lane's, lane 1's, its park lane's: they share gRPC's connection, and
    # ask at once only when they open their streams at the same moment; once one heard
    # UNIMPLEMENTED the others do not ask), and every record went to it one per message on
    # DeliverStream
    asks = Counter(old_consumer.batch_asks)
    assert asks and max(asks.values()) <= 3, asks
    assert set(asks) <= set(old_consumer.stream_peers)
    assert seen["stream"].batches and set(seen["stream"].batches) == {1}
    for kind, r in zip(topics, config.routes, strict=True):
        check_route(kind, seen[kind], lanes[r.name], letters[r.name])


def warm_up(seen: Seen, produce: Callable[[list[bytes]], None], run: PipelineRun) -> list[bytes]:
    """Rounds of four records until a request carried several: a worker that had heard the
    consumer (the wait is long: a loaded machine's Spark batches of four routes are slow)."""
    sent: list[bytes] = []
    for n in range(30):
        round_ = [f"warm-{n}-{i}".encode() for i in range(4)]
        produce(round_)
        sent += round_
        wanted = set(sent)
        wait_until(
            lambda: {d.key for d in seen.deliveries} >= wanted,  # noqa: B023 (waited for here)
            timeout_s=120,
            what="the warm-up round",
            check=run.check,
        )
        if seen.batches and max(seen.batches) > 1:
            return sent
    raise AssertionError(f"no batch after {len(sent)} records: {seen.singles} single webhooks")


def check_route(kind: str, got: Seen, lane: list[DeadLetter], letters: list[DeadLetter]) -> None:
    """What one route's consumer saw, and its lane 1 and DLQ."""
    # Then the records travelled together: some frame or request held several
    if kind != "stream":
        assert max(got.batches) > 1, got.batches
        assert max(got.batches) <= (64 if kind == "offered" else 8)
    if kind == "offered":  # alone until the consumer had said it; every batch streamed
        assert got.singles >= 1 and got.streamed == len(got.batches), got
    # And each record met its own fate: every ack delivered once, from the main lane
    by_key: dict[bytes, list[Delivery]] = {}
    for d in got.deliveries:
        if not (d.key or b"").startswith(b"warm-"):
            by_key.setdefault(d.key or b"", []).append(d)
    assert set(by_key) == set(KEYS)
    for key in KEYS:
        expected = [(1, 0), (2, 1)] if key == b"retry" else [(1, 0)]
        assert [(d.attempt, d.lane) for d in by_key[key]] == expected, (kind, key)
    # And the retried record went through lane 1, alone, and came back byte for byte
    assert [letter.value for letter in lane] == [ODD[::-1]]
    assert [d.value for d in by_key[b"retry"]] == [ODD[::-1], ODD[::-1]]
    # And the dead one reached the DLQ alone, with its reason; its batch-mates were acked
    [letter] = letters
    assert letter.key == b"dead" and letter.story is not None
    # (a single webhook's 422 says its status first: an offered route's record may go singly
    # from a worker that has not heard `siding-batch: v1` yet, docs/batch.md)
    assert letter.story.reason in ("dead on purpose", "http 422: dead on purpose")
    # And a binary value arrived exactly as produced
    assert by_key[b"binary"][0].value == ODD
