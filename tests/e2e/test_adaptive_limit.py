"""The adaptive limit settles near the consumer's knee, not at max_in_flight (issue 27, item 3;
docs/dispatch.md, "Adaptive concurrency"): a gRPC consumer whose latency grows with the calls
it holds (a queueing model, latency = base + k x open calls), a backlog far larger than
max_in_flight, and the consumer's own count of its open calls."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.model import delivery_id
from siding.v1 import consumer_pb2
from tests.e2e.counting import counting_consumer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BASE_S = 0.05
K_S = 0.0025
KNEE = round(BASE_S / K_S)  # 20 calls: there the latency is twice the unloaded one
MAX_IN_FLIGHT = 200


def queueing(_d: consumer_pb2.Delivery, open_calls: int) -> tuple[float, bool]:
    return BASE_S + K_S * open_calls, False


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "fixed"])
def test_the_limit_settles_near_the_consumers_knee(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    adaptive: bool,
) -> None:
    # Given 2,000 messages waiting, max_in_flight = 200, and a consumer whose latency is
    # 50 ms + 2.5 ms per call it holds (its knee: 20 calls)
    count = 2000
    topic = topic_name("knee")
    produce(kafka.bootstrap, topic, count)
    ids = {delivery_id(topic, 0, o) for o in range(count)}
    route = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "max_in_flight": MAX_IN_FLIGHT,
        "deadline": "10s",
        "min_partitions": 2,
        "adaptive": {"enabled": adaptive},
    }
    with counting_consumer(queueing) as consumer:
        route["endpoint"] = consumer.endpoint
        # When the route delivers them
        with PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
        ) as run:
            wait_until(
                lambda: consumer.acked() >= ids,
                timeout_s=300,
                what="every message acknowledged",
                check=run.check,
            )
            run.wait_committed({0: count}, timeout_s=60)
        seen = consumer.seen()
    # The consumer's count while it was busy, past the first second (a worker's ramp)
    busy = [(t, n) for t, n in seen.samples if n > 0]
    first = busy[0][0]
    settled = [n for t, n in busy if t > first + 1.0]
    median = statistics.median(settled)
    p90 = statistics.quantiles(settled, n=10)[-1]
    print(
        f"\nadaptive={adaptive}: open calls at the consumer median {median}, p90 {p90:.0f},"
        f" peak {seen.peak} (knee {KNEE}, max_in_flight {MAX_IN_FLIGHT});"
        f" {len(settled)} samples"
    )
    assert {i for i, _ in seen.asked} == ids
    if adaptive:
        # Then siding held the consumer near its knee: the baseline is measured at the floor
        # (one call per main-lane task, 2), so it settles near knee + 2 x 2, and never at 200
        assert KNEE / 2 <= median <= 2 * (KNEE + 4)
        assert p90 <= 3 * (KNEE + 4)
    else:
        # Without it, the backlog filled the window: the consumer was pushed far past its knee,
        # past what the adaptive run is held to (the control: the demand was there)
        assert seen.peak >= MAX_IN_FLIGHT * 0.9
        assert p90 > 3 * (KNEE + 4)
