"""A driver that lost a route's fence and resumes may still write one entry of a query's
checkpoint logs before its own checks stop it (docs/operations.md, "A split brain"). The driver
that holds the fence then finds its next entry written: it starts that query again from the
checkpoint instead of stopping the route (CI of stop 33: the standby of tests/e2e/test_fence.py
stopped there, on an error line that named the query and not the cause)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from siding import naming
from siding.config import parse_config
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun, config_text
from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings, read_records
from siding.devkit.sim_produce import produce
from siding.model import delivery_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FENCE = '[fence]\nenabled = true\nlease = "6s"\nrenew = "1s"\n'


def test_an_entry_written_by_a_driver_that_lost_the_fence_does_not_stop_the_holder(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a fenced route that delivered and committed 30 records
    source = topic_name("zombie")
    record = tmp_path / "received.csv"
    checkpoint = tmp_path / "cp"
    with SimConsumerProcess(SimSettings(record=str(record))) as sim:
        route = {
            "name": source,
            "topic": source,
            "group": f"{source}-g",
            "endpoint": f"grpc://{sim.target}",
        }
        text = config_text(kafka.bootstrap, route, checkpoint_dir=checkpoint, trigger="100ms")
        run = PipelineRun(parse_config(text.replace("[[route]]", FENCE + "[[route]]")), spark)
        produce(kafka.bootstrap, source, 30)
        caplog.set_level(logging.WARNING, logger="siding.pipeline.driver.app")
        with run:
            run.wait_committed({0: 30}, timeout_s=180)
            # When a driver that lost the fence, resuming, logs the main lane's next batch
            # first (an entry planned from the same checkpoint: here, an empty batch)
            offsets = checkpoint / naming.checkpoint_subdir(source, 0) / "offsets"
            latest = max(int(entry.name) for entry in offsets.iterdir() if entry.name.isdigit())
            written = offsets / f".{latest + 1}.zombie.tmp"
            written.write_bytes((offsets / str(latest)).read_bytes())
            written.rename(offsets / str(latest + 1))
            # and more records come
            produce(kafka.bootstrap, source, 30, start_seq=30)
            # Then the route goes on: they are delivered and committed, nothing lost
            run.wait_committed({0: 60}, timeout_s=180)
    delivered = {r.delivery_id for r in read_records(record)}
    assert delivered >= {delivery_id(source, 0, offset) for offset in range(60)}
    assert "because another driver wrote to its checkpoint" in caplog.text
