"""Calls that outlive their batch (docs/parking.md), on the real pipeline: slow calls are parked,
their answers settle them without asking the consumer again, on gRPC and HTTP."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from siding import naming
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import Behaviour, Fate, plan, read_records
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.kafka.reader import watermarks_of
from siding.model import delivery_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SimFactory = Callable[..., Any]


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_slow_calls_are_parked_and_settled_by_their_own_answers(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
    transport: str,
) -> None:
    # Given 300 messages taking 0-1.5 s: most outlive a 200 ms park ceiling; 5 % answer DEAD
    # and 5 % RETRY once, both often after their batch ended
    count = 300
    behaviour: dict[str, Any] = {
        "latency_s": (0.0, 1.5),
        "dead_ratio": 0.05,
        "retry_ratio": 0.05,
        "retry_until_attempt": 2,
    }
    topic = topic_name(f"park-{transport}")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(transport=transport, **behaviour)
    endpoint = f"grpc://{sim.target}" if transport == "grpc" else sim.url
    model = Behaviour(**behaviour)
    ids = [delivery_id(topic, 0, o) for o in range(count)]
    dead = {i for i in ids if plan(model, i, 1).fate is Fate.DEAD}
    retried = {i for i in ids if plan(model, i, 1).fate is Fate.RETRY}
    route = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": endpoint,
        "max_in_flight": 400,
        "deadline": "10s",
        "lanes": [{"delay": "500ms"}],
        "dlq_flood_min_batch": 1_000_000,
        "park": {"ceiling": "200ms"},
    }
    # When the pipeline runs
    with PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
    ) as run:
        run.wait_committed({0: count}, timeout_s=120)
        wait_until(
            lambda: (
                {letter.story.origin.delivery_id for letter in run.dead_letters() if letter.story}
                == dead
            ),
            timeout_s=60,
            what="the DEAD answers in the DLQ",
            check=run.check,
        )
        received = read_records(received_file)
        wait_until(
            lambda: (
                {r.delivery_id for r in read_records(received_file) if r.attempt == 2} == retried
            ),
            timeout_s=60,
            what="the RETRY answers delivered again from lane 1",
            check=run.check,
        )
        parked = run.totals.counts.parked
        letters = run.dead_letters()
        parked_topic = run.read_lane_topic(naming.park_topic(run.route.name))
    received = read_records(received_file)
    # Then calls were parked: their batches ended before they answered
    assert parked > 0
    assert parked_topic
    # And the consumer was asked once per attempt: never twice about an answer it gave
    asked = Counter((r.delivery_id, r.attempt) for r in received)
    assert max(asked.values()) == 1, [k for k, n in asked.items() if n > 1][:5]
    assert {i for i, _ in asked} == set(ids)
    assert {i for i, a in asked if a == 2} == retried
    # And a DEAD answer given after its batch ended is in the DLQ with its story
    for letter in letters:
        assert letter.story is not None
        assert letter.story.attempt == 1
        assert "dead" in letter.story.reason.lower() or "sim" in letter.story.reason.lower()


def test_parked_records_are_finished_after_parking_is_turned_off(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a run that parked 3 s calls, committed, and stopped before they answered
    count = 100
    topic = topic_name("park-off")
    produce(kafka.bootstrap, topic, count)
    sim, received_file = sim_consumer(latency_s=(0.005, 0.01), slow_ratio=0.2, slow_latency_s=3.0)
    route: dict[str, Any] = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}",
        # Well above the 3 s calls: on a loaded machine a 4 s deadline timed them out until
        # their retries ran out (a fresh-clone run at load 26 dead-lettered them)
        "deadline": "8s",
        "park": {"ceiling": "200ms"},
    }
    checkpoints = tmp_path / "ckpt"
    with PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=checkpoints, spark=spark
    ) as run:
        run.wait_committed({0: count}, timeout_s=120)
        parked = run.totals.counts.parked
    assert parked > 0
    # When the route runs again with parking turned off
    route["park"] = {"enabled": False}
    park_topic = naming.park_topic(route["name"])
    with PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=checkpoints, spark=spark
    ) as run:
        # Then its park lane still runs, and finishes every parked record
        def park_lane_done() -> bool:
            end = watermarks_of(run.client_conf, park_topic)
            return bool(end) and run.committed(park_topic) == end

        wait_until(park_lane_done, timeout_s=90, what="the park lane at its end", check=run.check)
    received = read_records(received_file)
    assert {r.delivery_id for r in received} == {delivery_id(topic, 0, o) for o in range(count)}
    assert not run.dead_letters()
