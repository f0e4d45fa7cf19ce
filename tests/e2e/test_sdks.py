"""Every consumer SDK's example consumer, a real process, serves a real `siding run` on the
embedded broker: one run, a route per language, transport and batching, all reading one topic
(but one: the offered route reads a copy of it).

Each route must show ACK, RETRY through a lane (retry on attempt 1, ack on attempt 2 from lane
1), DEAD into its DLQ, and a binary value that arrives byte for byte; a batched route must have
been served by batches (``DeliverBatches``, CloudEvents batched mode), sent gzipped. An HTTP
route without a ``batch`` key (Go's) sends single webhooks until the consumer says it reads
batches, and batches, their results streamed, from then on. The example consumers share one
protocol (docs/sdks.md, "End to end"): they answer by the record's key and write one JSON line
per delivery, naming the call it came by, which tells the routes of one consumer apart (the
route that may get both calls reads a topic of its own). Another SDK joins by adding a row to
``SDKS``.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from siding import naming
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import toml_value
from siding.devkit.process import stop_process
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, committed_offsets, ensure_topics
from siding.kafka.reader import read_records
from siding.routing import story

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_" + base64.b64encode(b"e2e-sdk-secret-32-bytes-long....").decode()
BINARY = bytes(range(256)) + b"\x00\xff\xfe"  # every byte value, and not UTF-8
RECORDS = {"ack": b"v-ack", "retry": b"v-retry", "dead": b"v-dead", "binary": BINARY}
BATCH = {"max": 16, "linger": "20ms"}
# How a route sends: one delivery per call, in batches, or (HTTP without a batch key) single
# webhooks until the consumer says it reads batches.
SINGLE, BATCHED, OFFERED = "single", "batched", "offered"
# The calls a delivery may come by, per transport and mode.
CALLS = {
    ("grpc", SINGLE): ("DeliverStream",),
    ("grpc", BATCHED): ("DeliverBatches",),
    ("http", SINGLE): ("webhook",),
    ("http", BATCHED): ("webhook-batch",),
    ("http", OFFERED): ("webhook", "webhook-batch"),
}


@dataclass(frozen=True)
class Sdk:
    """How to start one language's example consumer.

    ``command(build_dir, listen)`` gives the argv for a consumer serving the ``listen``
    addresses by transport (``{"grpc": "127.0.0.1:P"}``), with ``--record FILE`` appended by the
    test; ``build(build_dir)`` makes it runnable once (or ``None``). Every transport gets an
    unbatched and a batched route unless ``only`` says otherwise.
    """

    language: str
    transports: tuple[str, ...]
    command: Callable[[Path, Mapping[str, str]], list[str]]
    build: Callable[[Path], None] | None = None
    # Which (transport, mode) routes it gets when not the unbatched and batched of each: each
    # route is two more streaming queries in the one siding run.
    only: frozenset[tuple[str, str]] | None = None

    def routes(self, transport: str) -> list[str]:
        if self.only is None:
            return [SINGLE, BATCHED]
        return [m for m in (SINGLE, BATCHED, OFFERED) if (transport, m) in self.only]


def _python_command(_build: Path, listen: Mapping[str, str]) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "sdk/python/examples/e2e_consumer.py"),
        "--grpc",
        listen["grpc"],
    ]


def _go_build(build: Path) -> None:
    go = shutil.which("go")
    assert go, "go not found: the Go SDK's end-to-end test needs Go (make setup checks for it)"
    subprocess.run(
        [go, "build", "-o", str(build / "go-e2e-consumer"), "./examples/e2e"],
        cwd=ROOT / "sdk/go",
        check=True,
    )


def _go_command(build: Path, listen: Mapping[str, str]) -> list[str]:
    argv = [str(build / "go-e2e-consumer"), "--secret", SECRET]
    for transport, address in listen.items():
        argv += [f"--{transport}", address]
    return argv


def _flags(listen: Mapping[str, str]) -> list[str]:
    argv = ["--secret", SECRET]
    for transport, address in listen.items():
        argv += [f"--{transport}", address]
    return argv


def _node_command(_build: Path, listen: Mapping[str, str]) -> list[str]:
    node = shutil.which("node")
    assert node, "node not found: the Node SDK's end-to-end test needs Node.js 20+"
    built = ROOT / "sdk/node/dist/index.js"
    assert built.exists(), f"{built} is missing: make setup builds the Node SDK"
    return [node, str(ROOT / "sdk/node/examples/e2e-consumer.mjs"), *_flags(listen)]


def _java_command(_build: Path, listen: Mapping[str, str]) -> list[str]:
    java = shutil.which("java")
    assert java, "java not found: the Java SDK's end-to-end test needs Java 17+"
    jars = sorted((ROOT / "sdk/java/target").glob("siding-consumer-*.jar"))
    assert jars, "sdk/java/target has no jar: make setup builds the Java SDK"
    classpath = f"{jars[0]}:{ROOT / 'sdk/java/target/lib'}/*"
    # Run from source by the JDK's single-file launcher: no build step of its own.
    return [
        java,
        "-cp",
        classpath,
        str(ROOT / "sdk/java/examples/E2eConsumer.java"),
        *_flags(listen),
    ]


SDKS = (
    Sdk("python", ("grpc",), _python_command),
    # Go's webhooks: batched, and offered (its single webhooks come first; Java's route has
    # batch = false).
    Sdk(
        "go",
        ("grpc", "http"),
        _go_command,
        _go_build,
        only=frozenset({("grpc", SINGLE), ("grpc", BATCHED), ("http", BATCHED), ("http", OFFERED)}),
    ),
    # Both transports each, one of them batched: between them the four calls, DeliverStream and
    # webhook-batch by Node, DeliverBatches and webhook by Java (each SDK's tests cover the rest).
    Sdk(
        "node",
        ("grpc", "http"),
        _node_command,
        only=frozenset({("grpc", SINGLE), ("http", BATCHED)}),
    ),
    Sdk(
        "java",
        ("grpc", "http"),
        _java_command,
        only=frozenset({("grpc", BATCHED), ("http", SINGLE)}),
    ),
)


@dataclass(frozen=True)
class Consumer:
    sdk: Sdk
    listen: dict[str, str]
    record: Path
    proc: subprocess.Popen[bytes]

    def lines(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]


def _free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    return True


@pytest.fixture
def consumers(tmp_path: Path) -> Iterator[list[Consumer]]:
    started: list[Consumer] = []
    try:
        for sdk in SDKS:
            if sdk.build is not None:
                sdk.build(tmp_path)
            listen = {transport: _free_address() for transport in sdk.transports}
            record = tmp_path / f"{sdk.language}.jsonl"
            log = (tmp_path / f"{sdk.language}.log").open("wb")
            argv = [*sdk.command(tmp_path, listen), "--record", str(record)]
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            started.append(Consumer(sdk, listen, record, proc))
        for c in started:
            for address in c.listen.values():
                wait_until(
                    lambda a=address, c=c: _listening(a) or c.proc.poll() is not None,  # type: ignore[misc]
                    timeout_s=120,  # a JVM compiling its example under load takes a while
                    what=f"the {c.sdk.language} consumer listening on {address}",
                )
                assert c.proc.poll() is None, f"the {c.sdk.language} consumer exited"
        yield started
    finally:
        for c in started:
            stop_process(c.proc)


@dataclass(frozen=True)
class Route:
    consumer: Consumer
    transport: str
    mode: str
    topic: str

    def seen(self) -> list[dict[str, Any]]:
        """What this route delivered: the consumer's lines of its topic, transport and calls,
        in the order the consumer handled them."""
        calls = CALLS[(self.transport, self.mode)]
        return [
            line
            for line in self.consumer.lines()
            if line["transport"] == self.transport
            and line["call"] in calls
            and line["id"].startswith(f"{self.topic}/")
        ]


def _route(name: str, route: Route) -> dict[str, object]:
    address = route.consumer.listen[route.transport]
    http = route.transport == "http"
    config: dict[str, object] = {
        "name": name,
        "topic": route.topic,
        "group": f"{name}-group",
        "endpoint": f"http://{address}/" if http else f"grpc://{address}",
        "deadline": "10s",
        "lanes": [{"delay": "300ms"}],
        "dlq_flood_min_batch": 1_000_000,
        "park": {"enabled": False},  # answers are instant: one streaming query fewer per route
    }
    if route.mode == OFFERED:
        # No batch key: single webhooks until an answer says 'siding-batch: v1'. One in flight,
        # so the deliveries after the first answer go in batches (their results streamed).
        config["max_in_flight"] = 1
    elif route.mode == SINGLE:
        config["batch"] = False  # one delivery per call, switched off explicitly
    else:
        # Batched routes also go gzipped, every body and message (docs/sdks.md, "Compressed
        # deliveries"): Java's gRPC server and Node's webhook server decode them here. A gRPC
        # route batches by default (docs/batch.md): its batched route has no batch key.
        if http:
            config["batch"] = BATCH
        config["compression"] = "gzip"
        config["compress_above"] = 0
    if http:
        config["auth"] = {"webhook_secret": SECRET}
    return config


def _config(bootstrap: str, routes: Sequence[Mapping[str, object]], checkpoints: Path) -> str:
    lines = [
        "[kafka]",
        f"bootstrap = {toml_value(bootstrap)}",
        "[spark]",
        'master = "local[*]"',  # a task slot for every lane of every route at once
        f"checkpoint_dir = {toml_value(str(checkpoints))}",
        'trigger = "200ms"',
        "[control]",
        'listen = ""',
    ]
    for route in routes:
        lines.append("[[route]]")
        tables = {k: v for k, v in route.items() if isinstance(v, Mapping)}
        lines += [f"{k} = {toml_value(v)}" for k, v in route.items() if k not in tables]
        for table, values in tables.items():
            lines.append(f"[route.{table}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def test_every_sdk_answers_a_real_siding_run(
    kafka: EmbeddedKafka,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    consumers: list[Consumer],
) -> None:
    started = time.monotonic()
    # Given one topic with an ack, a retry, a dead and a binary record (and one more with the
    # same, for the offered route)
    topic, offered_topic = topic_name("sdks"), topic_name("sdks-offered")
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(client), [TopicSpec(topic), TopicSpec(offered_topic)])
    producer = Producer(client)
    for key, value in RECORDS.items():
        for t in (topic, offered_topic):
            producer.produce(t, key=key.encode(), value=value)
    assert producer.flush(10) == 0
    # And a route per language, transport and mode, each to its SDK's example consumer
    routes: dict[str, Route] = {}
    for c in consumers:
        for transport in c.listen:
            for mode in c.sdk.routes(transport):
                suffix = {SINGLE: "", BATCHED: "-batch", OFFERED: "-offered"}[mode]
                name = f"sdk-{c.sdk.language}-{transport}{suffix}-{topic[-8:]}"
                its_topic = offered_topic if mode == OFFERED else topic
                routes[name] = Route(c, transport, mode, its_topic)
    config_routes = [_route(name, route) for name, route in routes.items()]
    text = _config(kafka.bootstrap, config_routes, tmp_path / "checkpoints")
    parsed = parse_config(text)  # a bad config fails here, not in the child
    config = tmp_path / "siding.toml"
    config.write_text(text)
    log = tmp_path / "siding.log"

    def letters(name: str) -> list[Any]:
        return read_records(client, naming.route_dlq(parsed.route_named(name)))

    def done(name: str) -> bool:
        route = routes[name]
        retried = any(s["key"] == "retry" and s["attempt"] == 2 for s in route.seen())
        offsets = committed_offsets(client, f"{name}-group", route.topic)
        return retried and offsets.get(0, -1) >= len(RECORDS) and bool(letters(name))

    # When `siding run` runs them all
    with _siding_run(config, log) as proc:

        def running() -> None:
            assert proc.poll() is None, f"siding run exited:\n{log.read_text()[-3000:]}"
            for c in consumers:
                assert c.proc.poll() is None, f"the {c.sdk.language} consumer exited"

        for name in routes:
            wait_until(lambda n=name: done(n), timeout_s=240, what=f"route {name}", check=running)  # type: ignore[misc]
    assert proc.returncode == 0, log.read_text()[-3000:]
    # Then each route saw exactly what each answer means
    for name, route in routes.items():
        _check_route(name, route.seen(), letters(name))
    # And the offered route began with single webhooks (nothing said yet) and went on in
    # batches once the consumer's answer said it reads them
    for name, route in routes.items():
        if route.mode == OFFERED:
            calls = [line["call"] for line in route.seen()]
            assert calls[0] == "webhook", (name, calls)
            assert "webhook-batch" in calls, (name, calls)
    # And every consumer stops gracefully on SIGTERM
    for c in consumers:
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(30) == 0, f"the {c.sdk.language} consumer did not stop cleanly"
    print(f"\n{len(routes)} routes, {len(SDKS)} SDKs: {time.monotonic() - started:.1f} s")


@contextmanager
def _siding_run(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`siding run -c config` as a process; stopped with SIGTERM (as a service manager would)."""
    entry = "from siding.cli.main import main; main()"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", entry, "run", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        stop_process(proc, timeout_s=60)


def _check_route(name: str, lines: list[dict[str, Any]], letters: list[Any]) -> None:
    by = {(s["key"], s["attempt"]): s for s in lines}
    assert set(by) == {("ack", 1), ("retry", 1), ("retry", 2), ("dead", 1), ("binary", 1)}, (
        name,
        lines,
    )
    assert len(lines) == len(by), f"{name}: a delivery came twice: {lines}"
    assert by[("ack", 1)]["verdict"] == "ack"
    # RETRY through a lane: answered retry in the main lane, acked from lane 1
    assert (by[("retry", 1)]["lane"], by[("retry", 1)]["verdict"]) == (0, "retry")
    assert (by[("retry", 2)]["lane"], by[("retry", 2)]["verdict"]) == (1, "ack")
    assert bytes.fromhex(by[("binary", 1)]["value_hex"]) == BINARY, name
    # DEAD into the DLQ, with its story
    [letter] = letters
    told = story.decode(letter.headers)
    assert (letter.key, letter.value) == (b"dead", b"v-dead")
    assert told is not None
    assert told.origin.offset == 2
    assert told.reason.endswith("dead on purpose"), told.reason
