"""The driver's log tells an operator what happened: a summary per batch, and the circuit
breaker opening while the consumer is down and closing when it is back (docs/operations.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_produce import produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SimFactory = Callable[..., Any]


def test_batches_and_breaker_transitions_are_logged_on_the_driver(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a route delivering to a consumer
    topic = topic_name("log")
    produce(kafka.bootstrap, topic, 50)
    sim, _ = sim_consumer()
    route = {
        "name": topic[-60:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": f"grpc://{sim.target}",
        "deadline": "2s",
        "lanes": [{"delay": "1s"}],
    }
    caplog.set_level(logging.INFO, logger="siding.batches")
    run = PipelineRun.from_route(
        kafka.bootstrap, route, checkpoint_dir=tmp_path / "checkpoints", spark=spark
    )
    with run:
        run.wait_committed({0: 50})
        # When the consumer is away for a few seconds while messages come
        sim.stop()
        produce(kafka.bootstrap, topic, 50, start_seq=50)
        time.sleep(6)  # the outage itself is the scenario, not a wait for a result
        sim.start()
        run.wait_committed({0: 100})
    # Then the log has each batch's summary and the breaker's transitions
    ours = [
        r.getMessage().removeprefix(f"route {route['name']}")
        for r in caplog.records
        if r.name == "siding.batches" and r.getMessage().startswith(f"route {route['name']}")
    ]
    levels = {
        r.getMessage().split("circuit breaker ")[-1].split(" (")[0]: r.levelno
        for r in caplog.records
        if "circuit breaker" in r.getMessage()
    }
    main = [m for m in ours if m.startswith(" main: ")]
    assert sum(int(m.split()[1]) for m in main) >= 100
    assert any(m.startswith(": circuit breaker closed -> open") for m in ours)
    assert levels["closed -> open"] == logging.WARNING
    assert levels["half_open -> closed"] == logging.INFO
