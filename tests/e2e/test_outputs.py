"""Consumers answer with events (issue 17 part 2, docs/outputs.md): a real `siding run`, a real
broker and the Python SDK's gRPC server answering each message with two output records into an
allowed topic, and some messages with a third into a topic the route does not allow; beside it a
second route whose webhook consumer answers with outputs in its 2xx JSON body (the SDK's answer).

One run is killed with SIGKILL after some outputs were written and before their inputs were
committed, then started again: no input is left without its outputs, every copy of an output is
the one the consumer sent (binary-exact, its id header included), and the refused answers end in
the DLQ with their reason, none of their outputs produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_produce import new_producer
from siding.devkit.wait import wait_until
from siding.kafka.admin import TopicSpec, admin_client, committed_offsets, ensure_topics
from siding.kafka.reader import Record, read_records
from siding.model import delivery_id
from siding.pipeline.driver.app import Application
from siding.pipeline.driver.topics import RouteFailed
from siding.routing.outputs import OUTPUT_ID
from siding_consumer import ConsumerServer, Delivery, Output, Reply, ack
from siding_consumer.envelope import delivery_from_request, single_answer
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COUNT = 30
HOOKED = 10  # messages of the webhook route
FORBIDDEN = {5, 17}  # answered with a third output into a topic the route does not allow
SLOW = COUNT - 1  # its first call holds its batch open while the other tasks' outputs are written
SLOW_CAP_S = 15.0  # ... until the test has killed siding, at most this long
ALL_BYTES = bytes(range(256))
_ENTRY = "from siding.cli.main import main; main()"


def outputs_for(seq: int, allowed: str) -> list[Output]:
    """What the consumer answers for input ``seq``: binary keys, values and header values."""
    tag = seq.to_bytes(2, "big")
    return [
        Output(
            allowed,
            key=b"\x00" + tag + bytes([n]),
            value=ALL_BYTES + tag + bytes([n]),
            headers=(("n", bytes([n, 0, 255])), ("empty", b""), ("n", tag)),
        )
        for n in range(2)
    ]


class Consumer:
    """The SDK's gRPC server on a thread of its own: remembers every delivery it answered."""

    def __init__(self, allowed: str, forbidden: str) -> None:
        self.allowed, self.forbidden = allowed, forbidden
        self.seen: list[tuple[int, int]] = []  # (seq, attempt)
        self.slow_running = threading.Event()
        self.release = threading.Event()
        self._slow_done = False
        self._lock = threading.Lock()
        self._loops = LoopThread()
        self._serving: Future[None] | None = None
        self._stop = asyncio.Event()
        self._ready = threading.Event()
        self.target = ""
        self.webhook = ""

    async def handle(self, d: Delivery) -> Reply:
        seq = int((d.key or b"").decode())
        with self._lock:
            self.seen.append((seq, d.attempt))
            slow = seq == SLOW and not self._slow_done
            self._slow_done = self._slow_done or slow  # slow the first time only
        if slow:
            self.slow_running.set()
            for _ in range(int(SLOW_CAP_S / 0.05)):
                if self.release.is_set():
                    break
                await asyncio.sleep(0.05)
            self.slow_running.clear()
        outputs = outputs_for(seq, self.allowed)
        if seq in FORBIDDEN:
            outputs.append(Output(self.forbidden, value=b"not allowed"))
        return ack(outputs)

    async def hook(self, request: web.Request) -> web.StreamResponse:
        """The webhook route: the same outputs, answered as the SDK's webhook app does."""
        d = delivery_from_request(dict(request.headers), await request.read())
        answer = single_answer(ack(outputs_for(int((d.key or b"").decode()), self.allowed)))
        return web.Response(status=answer.status, headers=dict(answer.headers), body=answer.body)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self.hook)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        self.webhook = f"http://{host}:{port}/hook"
        try:
            async with ConsumerServer(self.handle, "127.0.0.1:0", grace_s=1) as server:
                self.target = server.target
                self._ready.set()
                await self._stop.wait()
        finally:
            await runner.cleanup()

    def __enter__(self) -> Consumer:
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(), self._loops.loop)
        self._ready.wait(30)
        assert self.target and self.webhook, "the consumer servers did not start"
        return self

    def __exit__(self, *_: object) -> None:
        self._loops.loop.call_soon_threadsafe(self._stop.set)
        if self._serving is not None:
            self._serving.result(30)
        self._loops.close()


@pytest.fixture
def consumer(topic_name: Callable[[str], str]) -> Iterator[Consumer]:
    with Consumer(topic_name("billed"), topic_name("secret")) as running:
        yield running


def by_output_id(records: list[Record]) -> dict[str, list[Record]]:
    found: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        found[dict(record.headers)[OUTPUT_ID].decode()].append(record)
    return found


def _produce(bootstrap: str, source: str, hooked: str) -> None:
    producer = new_producer(bootstrap)
    for seq in range(COUNT):
        producer.produce(source, key=str(seq).encode(), value=b"order %d" % seq)
    for seq in range(HOOKED):
        producer.produce(hooked, key=str(seq).encode(), value=b"hooked %d" % seq)
    assert producer.flush(30) == 0


def _config(bootstrap: str, source: str, hooked: str, consumer: Consumer, ckpt: Path) -> str:
    """Two routes: the gRPC one (retry lane, no parking, four tasks) and the webhook one."""
    grpc_route = {
        "name": source[-80:],
        "topic": source,
        "group": f"{source}-group",
        "endpoint": f"grpc://{consumer.target}",
        "outputs": [consumer.allowed],
        "deadline": "20s",
        "lanes": [{"delay": "300ms"}],
        "min_partitions": 4,
        "park": {"enabled": False},  # the slow call holds its batch: the window for the kill
        "dlq_flood_min_batch": 1_000_000,
        # The replay must deliver the batch again (copies of outputs written before the kill);
        # with progress records it leaves out what was durable, all of it when the slow call
        # had already answered (docs/replay.md)
        "progress_interval": "0s",
    }
    webhook_route = {
        "name": hooked[-80:],
        "topic": hooked,
        "group": f"{hooked}-group",
        "endpoint": consumer.webhook,
        "outputs": [consumer.allowed],
        "park": {"enabled": False},  # one query less
    }
    text = config_text(bootstrap, grpc_route, checkpoint_dir=ckpt, trigger="250ms")
    second = config_text(bootstrap, webhook_route, checkpoint_dir=ckpt)
    return text + second[second.index("[[route]]") :]


def _assert_exact(
    produced: dict[str, list[Record]], inputs: list[tuple[str, int]], allowed: str
) -> None:
    """Every copy of every output is the consumer's record, then siding's five headers."""
    for topic, seq in inputs:
        for n, output in enumerate(outputs_for(seq, allowed)):
            for copy in produced[f"{delivery_id(topic, 0, seq)}/{n}"]:
                assert (copy.key, copy.value) == (output.key, output.value)
                assert copy.headers == (
                    *output.headers,
                    (OUTPUT_ID, f"{delivery_id(topic, 0, seq)}/{n}".encode()),
                    ("siding.input-topic", topic.encode()),
                    ("siding.input-partition", b"0"),
                    ("siding.input-offset", str(seq).encode()),
                    ("siding.output-route", topic[-80:].encode()),
                )


def _assert_refused(watcher: PipelineRun, consumer: Consumer, client: dict[str, str]) -> None:
    assert not read_records(client, consumer.forbidden)
    attempts: dict[int, set[int]] = defaultdict(set)
    for seq, attempt in consumer.seen:
        attempts[seq].add(attempt)
    assert all(attempts[s] == {1, 2} for s in FORBIDDEN), attempts
    for letter in watcher.dead_letters():
        assert letter.story is not None
        assert "retries exhausted after 2 attempts" in letter.story.reason
        assert f"writes to '{consumer.forbidden}', not among the route's outputs" in (
            letter.story.reason
        )


def test_outputs_are_produced_before_their_input_counts_as_done_even_through_a_sigkill(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    consumer: Consumer,
) -> None:
    # Given 30 messages waiting (one batch, split over four tasks), 10 for the webhook route,
    # and topics for the outputs
    source, hooked = topic_name("src"), topic_name("hooked")
    client = {"bootstrap.servers": kafka.bootstrap}
    ensure_topics(
        admin_client(client),
        [TopicSpec(t) for t in (source, hooked, consumer.allowed, consumer.forbidden)],
    )
    _produce(kafka.bootstrap, source, hooked)
    text = _config(kafka.bootstrap, source, hooked, consumer, tmp_path / "ckpt")
    config = tmp_path / "siding.toml"
    config.write_text(text)
    watcher = PipelineRun(parse_config(text))  # reads offsets and topics; never started
    log = tmp_path / "siding.log"

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-c", _ENTRY, "run", "-c", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(os.environ),
            )

    def written() -> dict[str, list[Record]]:
        return by_output_id(read_records(client, consumer.allowed))

    # When `siding run` is killed while the slow call holds the batch, after other tasks wrote
    # outputs
    proc = start()
    try:
        wait_until(
            # outputs first: seen while the slow call still holds the batch, they were written
            # before its commit, and the slow call holds it until the kill
            lambda: (
                any(i.startswith(f"{source}/") for i in written())
                and consumer.slow_running.is_set()
            ),
            timeout_s=180,
            what="outputs written while the batch is still open",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        consumer.release.set()
    assert proc.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    before_kill = written()
    # Then the kill fell between output and commit: outputs exist for inputs not committed
    committed = watcher.committed().get(0, -1)
    offsets = {
        int(dict(r.headers)["siding.input-offset"])
        for copies in before_kill.values()
        for r in copies
        if dict(r.headers)["siding.input-topic"] == source.encode()
    }
    assert offsets and max(offsets) >= committed, (offsets, committed)

    # When siding starts again (in this process, on the tests' Spark session) and finishes
    with PipelineRun(parse_config(text), spark=spark) as run:
        run.wait_committed({0: COUNT}, timeout_s=180)
        wait_until(
            lambda: committed_offsets(client, f"{hooked}-group", hooked).get(0, -1) >= HOOKED,
            timeout_s=60,
            what="the webhook route committed",
            check=run.check,
        )
        wait_until(
            lambda: {d.story.origin.offset for d in run.dead_letters() if d.story} == FORBIDDEN,
            timeout_s=60,
            what="the refused answers dead-lettered",
            check=run.check,
        )
        counted = run.totals.counts.outputs

    # Then every allowed input has both its outputs, every copy exactly as the consumer sent it
    produced = written()
    copies = sum(len(c) for c in produced.values()) - sum(len(c) for c in before_kill.values())
    # The restarted run counted what it wrote (a write of the killed run may land after the read
    # just after the kill, so the copies may be more)
    assert 0 < counted <= copies, (counted, copies)
    inputs = [(source, s) for s in range(COUNT) if s not in FORBIDDEN]
    inputs += [(hooked, s) for s in range(HOOKED)]
    expected_ids = {f"{delivery_id(t, 0, s)}/{n}" for t, s in inputs for n in range(2)}
    assert set(produced) == expected_ids
    _assert_exact(produced, inputs, consumer.allowed)
    # The outputs written before the kill were written again only as copies with the same id
    assert set(before_kill) <= expected_ids
    # Nothing of a refused answer was produced; each was asked again, then dead-lettered with
    # the reason naming the topic
    _assert_refused(watcher, consumer, client)
    duplicated = sum(len(copies) - 1 for copies in produced.values())
    print(
        f"outputs: {len(produced)} ids, {duplicated} duplicate copies after the kill;"
        f" the restarted run counted {counted} of the {copies} copies written since the kill"
    )


def test_a_route_whose_output_topic_does_not_exist_does_not_start(
    kafka: EmbeddedKafka, tmp_path: Path, topic_name: Callable[[str], str]
) -> None:
    # Given a route listing an output topic nobody created (siding does not create them)
    source, nowhere = topic_name("src"), topic_name("nowhere")
    ensure_topics(admin_client({"bootstrap.servers": kafka.bootstrap}), [TopicSpec(source)])
    route = {
        "name": source[-80:],
        "topic": source,
        "group": f"{source}-group",
        "endpoint": "grpc://127.0.0.1:1",
        "outputs": [nowhere],
    }
    text = config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt")
    # Then it does not start, and says which topic is missing (before any Spark is started)
    with pytest.raises(RouteFailed, match=f"output topic\\(s\\) {nowhere} do not exist"):
        Application(parse_config(text)).start()
