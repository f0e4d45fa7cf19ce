"""A route's checkpoint knows what it belongs to: started against another topic it is refused
at once, in one line, before Spark is asked (issue 11: the quickstart run twice)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_produce import produce
from siding.errors import CheckpointError
from siding.pipeline.offline.owner import OWNER_FILE, Owner, read_owner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SimFactory = Callable[..., Any]
_ENTRY = "from siding.cli.main import main; main()"


def _route(name: str, topic: str, endpoint: str) -> dict[str, object]:
    return {"name": name, "topic": topic, "group": f"{topic}-group", "endpoint": endpoint}


def test_a_checkpoint_of_another_topic_is_refused_in_one_line(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
) -> None:
    # Given a route that ran on topic A and committed its batches in its checkpoint
    first, second = topic_name("a"), topic_name("b")
    produce(kafka.bootstrap, first, 5)
    produce(kafka.bootstrap, second, 5)
    sim, _ = sim_consumer()
    checkpoints = tmp_path / "checkpoints"
    name = f"owned-{first[-8:]}"  # the topics' unique token
    route_dir = checkpoints / name
    endpoint = f"grpc://{sim.target}"

    def run_on(topic: str) -> PipelineRun:
        route = _route(name, topic, endpoint)
        return PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=checkpoints, spark=spark
        )

    with run_on(first) as run:
        run.wait_committed({0: 5})
    recorded = read_owner(route_dir)
    assert recorded is not None and (recorded.route, recorded.topic) == (name, first)
    assert recorded.cluster_id  # the embedded broker has one
    # When the same route and checkpoint_dir start on topic B
    with pytest.raises(CheckpointError) as caught:
        run_on(second).__enter__()
    # Then it is refused with one line naming the checkpoint, its owner and the ways out
    message = str(caught.value)
    assert message.startswith(f"checkpoint {route_dir} belongs to {recorded.describe()}")
    assert Owner(name, second, recorded.cluster_id).describe() in message
    assert "checkpoint_dir" in message and f"delete {route_dir}" in message
    assert "\n" not in message and "Exception" not in message

    # And `siding run` says exactly that one line, without a stack trace, before starting Spark
    config = tmp_path / "siding.toml"
    config.write_text(
        config_text(kafka.bootstrap, _route(name, second, endpoint), checkpoint_dir=checkpoints)
    )
    done = subprocess.run(
        [sys.executable, "-c", _ENTRY, "run", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if not line.startswith("20")]  # log lines
    assert lines == [f"error: {message}"], done.stderr
    assert "Traceback" not in done.stderr and "Spark" not in done.stderr

    # And a checkpoint written before owner files existed is judged by its Spark offsets
    (route_dir / OWNER_FILE).unlink()
    with pytest.raises(CheckpointError, match=f"belongs to topic {first}"):
        run_on(second).__enter__()
    # while its own topic adopts it again
    with run_on(first) as run:
        run.wait_committed({0: 5})
    assert read_owner(route_dir) == recorded
