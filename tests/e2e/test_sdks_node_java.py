"""The Node and Java SDKs end to end: each language's example consumer runs as its own process
(``node sdk/node/examples/e2e-consumer.mjs``, ``java ... sdk/java/examples/E2eConsumer.java``) and
serves one siding run on the embedded broker, over gRPC and signed HTTP webhooks, one route of each
language batched. Per route: acks, a RETRY through lane 1, a DEAD in the DLQ, a binary value byte
for byte; and the consumers' own counts show which RPC or request kind carried the records."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from siding import naming
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import DeadLetter, PipelineRun, config_text
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, committed_offsets, ensure_topics
from tests.conftest import unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
SECRET = "whsec_" + base64.b64encode(b"sdk-e2e-secret-node-and-java-01").decode()
ODD = bytes(range(256)) * 3  # every byte value, NUL and 0xff included
KEYS = [b"ack-0", b"ack-1", b"retry", b"ack-2", b"dead", b"ack-3", b"binary", b"ack-4"]
VALUES = {b"binary": ODD, b"retry": ODD[::-1]}
BATCH = {"max": 8, "linger": "20ms"}


@dataclass
class Consumer:
    """One example consumer process: where it listens, and what it wrote down."""

    language: str
    process: subprocess.Popen[str]
    grpc_target: str
    http_url: str
    record: Path
    output: IO[str]

    def received(self, topic: str) -> list[dict[str, Any]]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return [r for r in map(json.loads, lines) if r["topic"] == topic]

    def stop(self) -> tuple[int, str]:
        """SIGTERM (a graceful stop), then its exit code and everything it printed."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(60)
        self.output.seek(0)
        return code, self.output.read()


def _command(language: str) -> list[str]:
    if language == "node":
        if shutil.which("node") is None or not (REPO / "sdk/node/dist/index.js").exists():
            unavailable("the Node SDK", FileNotFoundError("node or sdk/node/dist (make setup)"))
        return ["node", str(REPO / "sdk/node/examples/e2e-consumer.mjs")]
    jars = sorted((REPO / "sdk/java/target").glob("siding-consumer-*.jar"))
    if shutil.which("java") is None or not jars:
        unavailable("the Java SDK", FileNotFoundError("java or sdk/java/target (make setup)"))
    classpath = f"{jars[0]}{os.pathsep}{REPO / 'sdk/java/target/lib'}/*"
    return ["java", "-cp", classpath, str(REPO / "sdk/java/examples/E2eConsumer.java")]


@pytest.fixture
def start_consumer(tmp_path: Path) -> Iterator[Callable[[str], Consumer]]:
    started: list[Consumer] = []

    def start(language: str) -> Consumer:
        record = tmp_path / f"{language}.jsonl"
        output = open(tmp_path / f"{language}.out", "w+")  # noqa: SIM115 (closed at teardown)
        env = {
            **os.environ,
            "RECORD": str(record),
            "WEBHOOK_SECRET": SECRET,
            "GRPC_LISTEN": "127.0.0.1:0",
            "HTTP_LISTEN": "127.0.0.1:0",
            "GRPC_PORT": "0",
            "HTTP_PORT": "0",
        }
        process = subprocess.Popen(
            _command(language), stdout=output, stderr=subprocess.STDOUT, text=True, env=env
        )

        def ready() -> re.Match[str] | None:
            if process.poll() is not None:
                output.seek(0)
                raise AssertionError(f"the {language} consumer exited: {output.read()}")
            output.seek(0)
            return re.search(r"ready grpc=(\S+) http=(\S+)", output.read())

        found = wait_until(ready, timeout_s=120, what=f"the {language} consumer to listen")
        assert found is not None
        consumer = Consumer(language, process, found[1], found[2], record, output)
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        with contextlib.suppress(ProcessLookupError):
            consumer.process.kill()
        consumer.process.wait(30)
        consumer.output.close()


def _route(name: str, topic: str, endpoint: str, *, batched: bool) -> dict[str, object]:
    table: dict[str, object] = {
        "name": name,
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": endpoint,
        "deadline": "10s",
        "lanes": [{"delay": "300ms"}],
        "dlq_flood_min_batch": 1_000_000,
        # Nothing here outlives its batch; no park lane keeps the run to 8 queries.
        "park": {"enabled": False},
    }
    if batched:
        table["batch"] = BATCH
    if endpoint.startswith("http"):
        table["auth"] = {"webhook_secret": SECRET}
    return table


def _stats(printed: str, transport: str) -> dict[str, int]:
    """A consumer's last line, e.g. ``stats grpc={"unary":0,...} http=Stats[single=3, ...]``."""
    found = re.search(rf"{transport}=(\w+\[[^\]]*\]|\S+)", printed.splitlines()[-1])
    assert found, printed
    text = found[1]
    if text.startswith("{"):
        return {k: int(v) for k, v in json.loads(text).items()}
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text)}


def test_the_node_and_java_example_consumers_serve_a_siding_run(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    start_consumer: Callable[[str], Consumer],
) -> None:
    # Given the two example consumers, and four topics of 8 records each
    node, java = start_consumer("node"), start_consumer("java")
    plan = {  # route -> (consumer, transport, batched)
        "node-grpc": (node, "grpc", False),
        "node-http-batch": (node, "http", True),
        "java-grpc-batch": (java, "grpc", True),
        "java-http": (java, "http", False),
    }
    topics = {name: topic_name(name) for name in plan}
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(client), [TopicSpec(t) for t in topics.values()])
    producer = Producer(client)
    for topic in topics.values():
        for key in KEYS:
            producer.produce(topic, key=key, value=VALUES.get(key, b"plain"))
    assert producer.flush(10) == 0
    routes = []
    for name, (consumer, transport, batched) in plan.items():
        endpoint = f"grpc://{consumer.grpc_target}" if transport == "grpc" else consumer.http_url
        routes.append(_route(name, topics[name], endpoint, batched=batched))
    texts = [config_text(kafka.bootstrap, r, checkpoint_dir=tmp_path / "ckpt") for r in routes]
    config = parse_config(
        texts[0] + "".join("[[route]]" + t.split("[[route]]", 1)[1] for t in texts[1:])
    )

    # When one siding run serves all four routes
    with PipelineRun(config, spark) as run:

        def all_committed() -> bool:
            return all(
                committed_offsets(run.client_conf, r.group, r.topic).get(0) == len(KEYS)
                for r in config.routes
            )

        def retried() -> bool:
            return all(
                any(d["key"] == "retry" and d["attempt"] == 2 for d in c.received(topics[n]))
                for n, (c, _, _) in plan.items()
            )

        def dead_letters() -> dict[str, list[DeadLetter]]:
            found = {r.name: run.read_lane_topic(naming.route_dlq(r)) for r in config.routes}
            return found if all(found.values()) else {}

        wait_until(all_committed, timeout_s=180, what="every route committed", check=run.check)
        wait_until(retried, timeout_s=90, what="every retry from lane 1", check=run.check)
        letters = wait_until(dead_letters, what="every dead letter", check=run.check)
        lanes = {r.name: run.read_lane_topic(naming.lane_topic(r.name, 1)) for r in config.routes}

    # Then, per route, each record met its own fate in the consumer of its language
    for name, (consumer, transport, batched) in plan.items():
        by_key: dict[str, list[dict[str, Any]]] = {}
        for d in consumer.received(topics[name]):
            by_key.setdefault(d["key"], []).append(d)
        assert set(by_key) == {k.decode() for k in KEYS}, name
        for got_key, deliveries in by_key.items():
            expected = [(1, 0), (2, 1)] if got_key == "retry" else [(1, 0)]
            assert [(d["attempt"], d["lane"]) for d in deliveries] == expected, (name, got_key)
        # a binary value byte for byte, also after a trip through lane 1
        assert base64.b64decode(by_key["binary"][0]["value_base64"]) == ODD, name
        assert [base64.b64decode(d["value_base64"]) for d in by_key["retry"]] == [ODD[::-1]] * 2
        assert [letter.value for letter in lanes[name]] == [ODD[::-1]], name
        # the dead one alone in the DLQ, with the consumer's reason
        [letter] = letters[name]
        assert letter.key == b"dead" and letter.story is not None, name
        single_http = transport == "http" and not batched
        reason = "http 422: dead on purpose" if single_http else "dead on purpose"
        assert letter.story.reason == reason, name

    # And the consumers stop gracefully on SIGTERM, saying what carried the records
    node_code, node_printed = node.stop()
    java_code, java_printed = java.stop()
    assert node_code == 0, node_printed
    assert java_code == 128 + signal.SIGTERM, java_printed  # the JVM's exit on SIGTERM
    grpc_node, http_node = _stats(node_printed, "grpc"), _stats(node_printed, "http")
    grpc_java, http_java = _stats(java_printed, "grpc"), _stats(java_printed, "http")
    # node-grpc: DeliverStream; node-http-batch: batch requests of several records
    assert grpc_node["stream"] == len(KEYS) + 1 and grpc_node["batches"] == 0, node_printed
    assert http_node["single"] == 0 and http_node["batchDeliveries"] == len(KEYS) + 1
    assert http_node["batches"] < http_node["batchDeliveries"], node_printed
    # java-grpc-batch: DeliverBatches frames of several records; java-http: one per request
    assert grpc_java["stream"] == 0 and grpc_java["batchDeliveries"] == len(KEYS) + 1
    assert grpc_java["batches"] < grpc_java["batchDeliveries"], java_printed
    assert http_java["single"] == len(KEYS) + 1 and http_java["batches"] == 0, java_printed
