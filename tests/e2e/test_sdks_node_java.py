"""The Node and Java SDKs end to end: each language's example consumer, a real process
(``node sdk/node/examples/e2e-consumer.mjs``, ``java ... sdk/java/examples/E2eConsumer.java``),
serves one real ``siding run`` on the embedded broker over gRPC and signed HTTP webhooks, one route
per language and transport, one route of each language batched, all reading one topic.

Each route must show ACK, RETRY through a lane (retry on attempt 1, ack on attempt 2 from lane 1),
DEAD into its DLQ, and a binary value byte for byte. The example consumers speak the protocol of
every SDK's e2e consumer (``--grpc``, ``--http``, ``--secret``, ``--record``; one JSON line per
delivery); on SIGTERM they stop gracefully, exit 0 and print what each server carried, which shows
that the batched routes came in frames and requests of several records.
"""

from __future__ import annotations

import base64
import json
import os
import re
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
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_" + base64.b64encode(b"e2e-sdk-secret-node-and-java-32b").decode()
BINARY = bytes(range(256)) + b"\x00\xff\xfe"  # every byte value, and not UTF-8
RECORDS = {"ack": b"v-ack", "retry": b"v-retry", "dead": b"v-dead", "binary": BINARY}
BATCH = {"max": 8, "linger": "50ms"}


@dataclass(frozen=True)
class Sdk:
    """One language's example consumer: its argv (``--record FILE`` is appended by the test),
    and which of its transports get a batched route."""

    language: str
    transports: tuple[str, ...]
    batched: frozenset[str]
    command: Callable[[Mapping[str, str]], list[str]]


def _flags(listen: Mapping[str, str]) -> list[str]:
    argv = ["--secret", SECRET]
    for transport, address in listen.items():
        argv += [f"--{transport}", address]
    return argv


def _node_command(listen: Mapping[str, str]) -> list[str]:
    if shutil.which("node") is None or not (ROOT / "sdk/node/dist/index.js").exists():
        unavailable(
            "the Node SDK's consumer", FileNotFoundError("node, or sdk/node/dist: make setup")
        )
    return ["node", str(ROOT / "sdk/node/examples/e2e-consumer.mjs"), *_flags(listen)]


def _java_command(listen: Mapping[str, str]) -> list[str]:
    jars = sorted((ROOT / "sdk/java/target").glob("siding-consumer-*.jar"))
    if shutil.which("java") is None or not jars:
        unavailable(
            "the Java SDK's consumer", FileNotFoundError("java, or sdk/java/target: make setup")
        )
    classpath = f"{jars[0]}{os.pathsep}{ROOT / 'sdk/java/target/lib'}/*"
    example = str(ROOT / "sdk/java/examples/E2eConsumer.java")
    return ["java", "-cp", classpath, example, *_flags(listen)]


# Each language has a plain route and a batched one; between them both transports are batched.
SDKS = (
    Sdk("node", ("grpc", "http"), frozenset({"http"}), _node_command),
    Sdk("java", ("grpc", "http"), frozenset({"grpc"}), _java_command),
)


@dataclass(frozen=True)
class Consumer:
    sdk: Sdk
    listen: dict[str, str]
    record: Path
    log: Path
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
            listen = {transport: _free_address() for transport in sdk.transports}
            record = tmp_path / f"{sdk.language}.jsonl"
            log = tmp_path / f"{sdk.language}.log"
            argv = [*sdk.command(listen), "--record", str(record)]
            with log.open("wb") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            started.append(Consumer(sdk, listen, record, log, proc))
        for c in started:
            for address in c.listen.values():
                wait_until(
                    lambda a=address, c=c: _listening(a) or c.proc.poll() is not None,  # type: ignore[misc]
                    timeout_s=120,
                    what=f"the {c.sdk.language} consumer listening on {address}",
                )
                assert c.proc.poll() is None, f"{c.sdk.language} exited: {c.log.read_text()}"
        yield started
    finally:
        for c in started:
            stop_process(c.proc)


def _route(name: str, topic: str, endpoint: str, *, http: bool, batched: bool) -> dict[str, object]:
    route: dict[str, object] = {
        "name": name,
        "topic": topic,
        "group": f"{name}-group",
        "endpoint": endpoint,
        "deadline": "10s",
        "lanes": [{"delay": "300ms"}],
        "dlq_flood_min_batch": 1_000_000,
        "park": {"enabled": False},  # answers are instant: one streaming query fewer per route
    }
    if batched:
        route["batch"] = BATCH
    if http:
        route["auth"] = {"webhook_secret": SECRET}
    return route


def _config(bootstrap: str, routes: Sequence[Mapping[str, object]], checkpoints: Path) -> str:
    lines = [
        "[kafka]",
        f"bootstrap = {toml_value(bootstrap)}",
        "[spark]",
        'master = "local[2]"',
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


def _stats(printed: str) -> dict[str, dict[str, int]]:
    """The consumer's closing line, ``stats grpc={"stream":5,...} http=Stats[single=5, ...]``."""
    lines = [line for line in printed.splitlines() if line.startswith("stats ")]
    assert lines, printed
    found = re.findall(r"(grpc|http)=(\{[^}]*\}|\w+\[[^\]]*\])", lines[-1])
    return {
        transport: {k: int(v) for k, v in re.findall(r"\"?(\w+)\"?[=:](\d+)", counts)}
        for transport, counts in found
    }


def _check_route(name: str, lines: list[dict[str, Any]], letters: list[Any]) -> None:
    by = {(s["key"], s["attempt"]): s for s in lines}
    assert set(by) == {("ack", 1), ("retry", 1), ("retry", 2), ("dead", 1), ("binary", 1)}, (
        name,
        lines,
    )
    assert len(lines) == 5, f"{name}: a record delivered twice: {lines}"
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


def test_the_node_and_java_consumers_answer_a_real_siding_run(
    kafka: EmbeddedKafka,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    consumers: list[Consumer],
) -> None:
    started = time.monotonic()
    # Given one topic with an ack, a retry, a dead and a binary record
    topic = topic_name("sdks")
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(admin_client(client), [TopicSpec(topic)])
    producer = Producer(client)
    for key, value in RECORDS.items():
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(10) == 0
    # And a route per language and transport, one of each language batched
    routes: dict[str, tuple[Consumer, str]] = {}
    config_routes = []
    for c in consumers:
        for transport, address in c.listen.items():
            name = f"sdk-{c.sdk.language}-{transport}-{topic[-8:]}"
            routes[name] = (c, transport)
            endpoint = f"http://{address}/" if transport == "http" else f"grpc://{address}"
            batched = transport in c.sdk.batched
            config_routes.append(
                _route(name, topic, endpoint, http=transport == "http", batched=batched)
            )
    text = _config(kafka.bootstrap, config_routes, tmp_path / "checkpoints")
    parsed = parse_config(text)  # a bad config fails here, not in the child
    config = tmp_path / "siding.toml"
    config.write_text(text)
    log = tmp_path / "siding.log"

    def seen(name: str) -> list[dict[str, Any]]:
        c, transport = routes[name]
        return [line for line in c.lines() if line["transport"] == transport]

    def letters(name: str) -> list[Any]:
        return read_records(client, naming.route_dlq(parsed.route_named(name)))

    def done(name: str) -> bool:
        retried = any(s["key"] == "retry" and s["attempt"] == 2 for s in seen(name))
        committed = committed_offsets(client, f"{name}-group", topic).get(0, -1) >= len(RECORDS)
        return retried and committed and bool(letters(name))

    # When `siding run` runs them all
    with _siding_run(config, log) as proc:

        def running() -> None:
            assert proc.poll() is None, f"siding run exited:\n{log.read_text()[-3000:]}"
            for c in consumers:
                assert c.proc.poll() is None, f"{c.sdk.language} exited: {c.log.read_text()}"

        for name in routes:
            wait_until(lambda n=name: done(n), timeout_s=240, what=f"route {name}", check=running)  # type: ignore[misc]
    assert proc.returncode == 0, log.read_text()[-3000:]
    # Then each route saw exactly what each answer means
    for name in routes:
        _check_route(name, seen(name), letters(name))
    # And every consumer stops gracefully on SIGTERM, saying what carried the records
    for c in consumers:
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(60) == 0, f"{c.sdk.language} did not stop cleanly: {c.log.read_text()}"
        stats = _stats(c.log.read_text())
        for transport in c.listen:
            counts = stats[transport]
            if transport in c.sdk.batched:
                # five deliveries (the retry twice), some of them together in a frame/request
                assert counts["batchDeliveries"] == 5, (c.sdk.language, stats)
                assert counts["batches"] < 5, (c.sdk.language, stats)
                assert counts.get("stream", 0) == counts.get("single", 0) == 0
            else:
                one_by_one = counts["stream"] if transport == "grpc" else counts["single"]
                assert (one_by_one, counts["batches"]) == (5, 0), (c.sdk.language, stats)
    print(f"\n{len(routes)} routes, {len(SDKS)} SDKs: {time.monotonic() - started:.1f} s")
