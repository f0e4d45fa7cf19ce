"""Poison pills that look like outages (issue 18), on the real pipeline: a message that kills the
consumer process, run under a supervisor that restarts it 1 s after each exit as Kubernetes would.

The pill is dead-lettered after at most ``crash_limit`` + 2 deaths, every other message is
delivered and none of them is in the DLQ; a consumer killed with calls out and back 12 s later
dead-letters nothing.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import (
    CRASH_EXIT_CODE,
    Behaviour,
    Received,
    SimConsumerProcess,
    SimSettings,
    read_records,
)
from siding.devkit.sim_produce import message_key, produce
from siding.devkit.supervisor import Supervisor
from siding.devkit.wait import wait_until
from siding.model import delivery_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CRASH_LIMIT = 3
MAX_IN_FLIGHT = 50


def pill(seq: int) -> str:
    """Text only message ``seq``'s value contains (see ``sim_produce.message_value``)."""
    return f'"seq": {seq}}}'


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Callable[..., tuple[Supervisor, Path]]]:
    started: list[Supervisor] = []

    def start(transport: str, crash_on: tuple[str, ...]) -> tuple[Supervisor, Path]:
        record = tmp_path / "received.csv"
        settings = SimSettings(
            transport=transport,  # type: ignore[arg-type]
            behaviour=Behaviour(latency_s=(0.005, 0.015)),
            record=str(record),
            crash_on=crash_on,
        )
        supervisor = Supervisor(SimConsumerProcess(settings), restart_s=1.0).start()
        started.append(supervisor)
        return supervisor, record

    yield start
    for supervisor in started:
        supervisor.stop()


def produce_in_background(
    bootstrap: str, topic: str, count: int, **options: Any
) -> threading.Thread:
    # the topic exists before the route starts; the messages then come at the given rate
    produce(bootstrap, topic, 0)
    thread = threading.Thread(
        target=produce, args=(bootstrap, topic, count), kwargs=options, daemon=True
    )
    thread.start()
    return thread


def _wait_delivered(run: PipelineRun, received_file: Path, ids: set[str]) -> None:
    """Until the consumer has received every one of ``ids``: a main-lane commit means each
    record has a durable outcome, and a message out when the consumer died may have it in the
    park lane, which delivers it after (docs/dispatch.md, "Suspects")."""
    wait_until(
        lambda: {r.delivery_id for r in read_records(received_file)} >= ids,
        timeout_s=120,
        what="every message delivered",
        check=run.check,
    )


def first_receipts(received: list[Received]) -> dict[str, Received]:
    first: dict[str, Received] = {}
    for r in sorted(received, key=lambda r: r.received_s):
        first.setdefault(r.delivery_id, r)
    return first


@pytest.mark.parametrize(
    ("transport", "kind"), [("grpc", "stream"), ("grpc", "unary"), ("http", None)]
)
def test_a_message_that_kills_the_consumer_is_dead_lettered_and_nothing_else_is(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    supervised: Callable[..., tuple[Supervisor, Path]],
    transport: str,
    kind: str | None,
) -> None:
    # Given 600 messages at 100 msg/s, one of which makes the consumer exit at once
    count, bad = 600, 150
    topic = topic_name(f"pill-{kind or transport}")
    supervisor, received_file = supervised(transport, (pill(bad),))
    sim = supervisor.consumer
    route: dict[str, Any] = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}" if transport == "grpc" else sim.url,
        "max_in_flight": MAX_IN_FLIGHT,
        "deadline": "10s",
        "crash_limit": CRASH_LIMIT,
        "lanes": [{"delay": "1s"}],
    }
    if kind is not None:
        route["transport"] = kind
    producer = produce_in_background(kafka.bootstrap, topic, count, rate=100)
    pill_id = delivery_id(topic, 0, bad)
    # When the pipeline runs
    with PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
    ) as run:
        producer.join(60)
        wait_until(lambda: bool(run.dead_letters()), timeout_s=120, check=run.check)
        convicted_after_s = time.time() - supervisor.exits[0][0]
        run.wait_committed({0: count}, timeout_s=120)
        # the main lane committed: the messages out at a death may still wait in the park lane
        _wait_delivered(run, received_file, {delivery_id(topic, 0, n) for n in range(count)})
        letters = run.dead_letters()
    received = read_records(received_file)
    # Then the pill is in the DLQ, convicted for the deaths, after at most crash_limit + 2
    (letter,) = letters
    assert letter.story is not None and letter.story.origin.delivery_id == pill_id
    assert "the consumer died" in letter.story.reason
    assert "while handling this message" in letter.story.reason
    assert letter.story.attempt == 1  # deaths spend no attempt
    deaths = supervisor.deaths
    assert CRASH_LIMIT <= deaths <= CRASH_LIMIT + 2, supervisor.exits
    # every death was counted against it: none was taken for a message that never left
    counted = re.search(r"died (\d+) times", letter.story.reason)
    assert counted is not None and int(counted.group(1)) == deaths, letter.story.reason
    assert all(code == CRASH_EXIT_CODE for _, code in supervisor.exits)
    assert not supervisor.errors
    # And every other message was delivered; duplicates are bounded by what was out at deaths
    ids = {delivery_id(topic, 0, n) for n in range(count)}
    assert {r.delivery_id for r in received} == ids
    times = Counter(r.delivery_id for r in received)
    assert times[pill_id] == deaths  # it was received once per death, and never again
    duplicates = sum(n - 1 for i, n in times.items() if i != pill_id)
    print(
        f"\n{kind or transport}: {deaths} deaths, {duplicates} duplicate deliveries,"
        f" convicted {convicted_after_s:.1f}s after the first death"
    )
    assert duplicates <= deaths * MAX_IN_FLIGHT


def test_two_pills_of_two_keys_are_dead_lettered_and_their_keys_keep_order(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    supervised: Callable[..., tuple[Supervisor, Path]],
) -> None:
    # Given key mode over 10 keys, and two pills of two different keys
    count, keys, bad = 500, 10, (120, 243)
    assert message_key(bad[0], keys) != message_key(bad[1], keys)
    topic = topic_name("pill-keys")
    supervisor, received_file = supervised("grpc", tuple(pill(b) for b in bad))
    route: dict[str, Any] = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{supervisor.consumer.target}",
        "ordering": "key",
        "max_in_flight": MAX_IN_FLIGHT,
        "deadline": "10s",
        "crash_limit": CRASH_LIMIT,
        "lanes": [{"delay": "1s"}],
    }
    producer = produce_in_background(kafka.bootstrap, topic, count, rate=100, keys=keys)
    pills = {delivery_id(topic, 0, b) for b in bad}
    # When the pipeline runs
    with PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
    ) as run:
        producer.join(60)
        wait_until(lambda: len(run.dead_letters()) == 2, timeout_s=180, check=run.check)
        run.wait_committed({0: count}, timeout_s=120)
        _wait_delivered(run, received_file, {delivery_id(topic, 0, n) for n in range(count)})
        letters = run.dead_letters()
    received = read_records(received_file)
    # Then both pills are in the DLQ, and nothing else
    assert {letter.story.origin.delivery_id for letter in letters if letter.story} == pills
    assert supervisor.deaths <= 2 * (CRASH_LIMIT + 2), supervisor.exits
    assert {r.delivery_id for r in received} == {delivery_id(topic, 0, n) for n in range(count)}
    # And per key, messages were first delivered in order; a pill's followers waited for it
    first = first_receipts(received)
    by_key: dict[bytes | None, list[Received]] = {}
    for r in sorted(first.values(), key=lambda r: r.received_s):
        assert r.seq is not None
        by_key.setdefault(message_key(r.seq, keys), []).append(r)
    for key, line in by_key.items():
        seqs = [r.seq for r in line]
        assert seqs == sorted(seqs), f"key {key!r} out of order"  # type: ignore[type-var]
    last_pill_receipt = {b: max(r.received_s for r in received if r.seq == b) for b in bad}
    for b in bad:
        followers = [r for r in first.values() if r.seq is not None and r.seq > b]
        followers = [r for r in followers if message_key(r.seq or 0, keys) == message_key(b, keys)]
        assert followers and all(r.received_s > last_pill_receipt[b] for r in followers)


def test_a_consumer_killed_with_200_calls_out_and_back_after_12s_dead_letters_nothing(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
) -> None:
    # Given a consumer with 0.5 s calls and 400 messages
    count = 400
    topic = topic_name("outage")
    produce(kafka.bootstrap, topic, count)
    record = tmp_path / "received.csv"
    settings = SimSettings(behaviour=Behaviour(latency_s=(0.5, 0.5)), record=str(record))
    sim = SimConsumerProcess(settings).start()
    route: dict[str, Any] = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}",
        "max_in_flight": 400,
        "deadline": "10s",
        "lanes": [{"delay": "1s"}],
    }
    try:
        with PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
        ) as run:
            # When it is killed with at least 200 calls out, and comes back 12 s later (longer
            # than the 10 s deadline: every call out timed out or broke while it was away)
            wait_until(lambda: len(read_records(record)) >= 200, timeout_s=120, check=run.check)
            sim.kill()
            sim.stop()
            time.sleep(12)
            sim.start()
            run.wait_committed({0: count}, timeout_s=180)
            # (records that were out are suspects, sent one after another by the park lane)
            wait_until(
                lambda: len({r.delivery_id for r in read_records(record)}) == count,
                timeout_s=180,
                what="every message delivered",
                check=run.check,
            )
            letters = run.dead_letters()
    finally:
        sim.stop()
    # Then nothing was dead-lettered and everything was delivered
    assert letters == []
    missing = {delivery_id(topic, 0, n) for n in range(count)} - {
        r.delivery_id for r in read_records(record)
    }
    assert not missing, sorted(missing)
