"""Tracing end to end: a record retried once and then acked is one trace in a real
OpenTelemetry Collector, with siding's spans where its producer's trace says, and the ids the
consumer received in its gRPC metadata and delivery headers (docs/operations.md, "Tracing")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import pytest
from confluent_kafka import Producer

from siding import naming
from siding.config import parse_config
from siding.consumer import ack, dead, retry
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.otel_collector import OtelCollector
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding_consumer.v1 import consumer_pb2, consumer_pb2_grpc
from siding_consumer.wire import reply_to_proto
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TRACE = "0af7651916cd43dd8448eb211c80319c"
PRODUCER_SPAN = "b7ad6b7169203331"
UNSAMPLED_TRACE = "1af7651916cd43dd8448eb211c80319d"
DEAD_TRACE = "2af7651916cd43dd8448eb211c80319e"


@dataclass(frozen=True)
class Call:
    key: str
    attempt: int
    metadata: str  # the traceparent of the call's gRPC metadata
    header: str  # the traceparent of the delivery's headers


class RecordingConsumer(consumer_pb2_grpc.ConsumerServicer):
    """A real gRPC consumer: records the trace context of each call; RETRY for the first
    attempt of key "retry", DEAD for key "dead", ACK otherwise."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    async def Deliver(
        self, request: consumer_pb2.Delivery, context: grpc.aio.ServicerContext[Any, Any]
    ) -> consumer_pb2.Result:
        metadata = dict(context.invocation_metadata() or ())
        headers = {h.key: h.value.decode() for h in request.headers}
        key = request.key.decode()
        self.calls.append(
            Call(key, request.attempt, str(metadata.get("traceparent", "")), headers["traceparent"])
        )
        reply = ack()
        if key == "retry" and request.attempt == 1:
            reply = retry(reason="once more")
        elif key == "dead":
            reply = dead("dead on purpose")
        return reply_to_proto(reply, request.id)


async def _serve(consumer: RecordingConsumer) -> tuple[grpc.aio.Server, int]:
    """The consumer's gRPC server on a free loopback port (made on the loop it serves on)."""
    server = grpc.aio.server()
    consumer_pb2_grpc.add_ConsumerServicer_to_server(consumer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@pytest.fixture
def collector() -> Iterator[OtelCollector]:
    with OtelCollector() as running:
        yield running


def test_a_record_retried_once_then_acked_is_one_trace_in_the_collector(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
    collector: OtelCollector,
) -> None:
    # Given a record whose producer's sampled span is its traceparent, one whose producer did
    # not sample its trace, one more sampled, and a consumer that retries the first once and
    # answers DEAD for the third
    topic = topic_name("tracing")
    ensure_topics(admin_client({"bootstrap.servers": kafka.bootstrap}), [TopicSpec(topic)])
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    producer.produce(
        topic, key=b"retry", value=b"v", headers=[("traceparent", f"00-{TRACE}-{PRODUCER_SPAN}-01")]
    )
    unsampled = f"00-{UNSAMPLED_TRACE}-{PRODUCER_SPAN}-00"
    producer.produce(topic, key=b"quiet", value=b"v", headers=[("traceparent", unsampled)])
    dying = f"00-{DEAD_TRACE}-{PRODUCER_SPAN}-01"
    producer.produce(topic, key=b"dead", value=b"v", headers=[("traceparent", dying)])
    assert producer.flush(10) == 0
    consumer = RecordingConsumer()  # type: ignore[abstract]  # unary only
    server, port = loop_thread.run(_serve(consumer))
    route = {
        "name": _route_name(topic),
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://127.0.0.1:{port}",
        "transport": "unary",  # the call's metadata carries the context too (a stream's cannot)
        "deadline": "5s",
        "lanes": [{"delay": "300ms"}],
        "dlq_flood_min_batch": 1_000_000,
    }
    # Tracing on, sampling no new trace: what is recorded is what the producers sampled.
    text = config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path / "checkpoints")
    text += f'[tracing]\nenabled = true\nendpoint = "{collector.endpoint}"\nsample_ratio = 0.0\n'
    # When the route runs
    try:
        with PipelineRun(parse_config(text), spark) as run:
            run.wait_committed({0: 3})
            wait_until(
                lambda: any(c.key == "retry" and c.attempt == 2 for c in consumer.calls),
                timeout_s=60,
                what="the retried record delivered from lane 1",
                check=run.check,
            )
            spans = wait_until(
                lambda: _complete(collector.spans()),
                timeout_s=60,
                what="the traces' spans in the collector's file",
                check=run.check,
            )
    finally:
        loop_thread.run(server.stop(0))
    assert spans is not None
    # Then the producer's trace holds two attempt spans and a lane write, ids as the consumer saw
    _check_retried_trace(spans, topic, str(route["group"]), consumer.calls)
    # And the unsampled trace went on unsampled; the dead record's trace ends in a dead letter
    _check_other_traces(
        spans, collector.spans(), topic, naming.route_dlq(run.route), consumer.calls
    )


def _check_retried_trace(
    spans: list[dict[str, Any]], topic: str, group: str, calls: list[Call]
) -> None:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in (s for s in spans if s["traceId"] == TRACE):
        by_name.setdefault(span["name"], []).append(span)
    attempts = sorted(by_name[f"deliver {topic}"], key=lambda s: s["attrs"]["siding.attempt"])
    (lane_write,) = by_name[f"lane write {naming.lane_topic(_route_name(topic), 1)}"]
    assert [s["attrs"]["siding.outcome"] for s in attempts] == ["retry", "ack"]
    assert [s["attrs"]["siding.lane"] for s in attempts] == [0, 1]
    for span in (*attempts, lane_write):
        assert span["traceId"] == TRACE
        assert span["parentSpanId"] == PRODUCER_SPAN  # the incoming context survived the lane
        assert span["service"] == "siding"
        assert span["attrs"]["messaging.system"] == "kafka"
        assert span["attrs"]["messaging.consumer.group.name"] == group
    assert attempts[0]["kind"] == attempts[1]["kind"] == 3  # CLIENT
    assert lane_write["kind"] == 4  # PRODUCER
    assert attempts[0]["attrs"]["messaging.destination.name"] == topic
    assert attempts[0]["attrs"]["messaging.kafka.offset"] == 0
    assert attempts[1]["attrs"]["siding.previous_attempt"] == 1
    assert [link["spanId"] for link in lane_write.get("links", [])] == [attempts[0]["spanId"]]
    # And each call the consumer received carried its attempt span as parent
    retried = [c for c in calls if c.key == "retry"]
    assert [c.attempt for c in retried] == [1, 2]
    for call, span in zip(retried, attempts, strict=True):
        assert call.metadata == call.header == f"00-{TRACE}-{span['spanId']}-01"


def _check_other_traces(
    spans: list[dict[str, Any]], everything: list[dict[str, Any]], topic: str, dlq: str,
    calls: list[Call],
) -> None:  # fmt: skip
    # And the unsampled trace went on unsampled, with no span recorded
    (quiet,) = [c for c in calls if c.key == "quiet"]
    assert quiet.metadata.startswith(f"00-{UNSAMPLED_TRACE}-") and quiet.metadata.endswith("-00")
    assert PRODUCER_SPAN not in quiet.metadata
    assert not [s for s in everything if s["traceId"] == UNSAMPLED_TRACE]
    # And the dead record's trace holds its attempt and the driver's dead-letter span
    died = {s["name"]: s for s in spans if s["traceId"] == DEAD_TRACE}
    letter = died[f"dead letter {dlq}"]
    assert died[f"deliver {topic}"]["attrs"]["siding.outcome"] == "dead"
    assert letter["parentSpanId"] == PRODUCER_SPAN and letter["kind"] == 4
    assert letter["attrs"]["siding.source.offset"] == 2


def _route_name(topic: str) -> str:
    return topic.replace("_", "-")[-80:]


def _complete(spans: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    ours = [s for s in spans if s["traceId"] == TRACE]
    attempts = [s for s in ours if s["name"].startswith("deliver ")]
    writes = [s for s in ours if s["name"].startswith("lane write ")]
    letters = [s for s in spans if s["traceId"] == DEAD_TRACE and s["name"].startswith("dead ")]
    return spans if len(attempts) >= 2 and writes and letters else None
