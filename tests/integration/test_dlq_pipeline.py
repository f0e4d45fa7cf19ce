"""A running pipeline delivers merged dead letters again, under their original delivery ids."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings, read_records
from siding.devkit.wait import wait_until
from siding.dlq.filters import LetterFilter
from siding.dlq.merge import merge_letters
from siding.dlq.replay import Target
from tests.integration.dlq_support import BASE_MS, Spec, create_dlq, scope_of, write_letters

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_merged_letters_are_delivered_again_with_the_same_ids(
    kafka: EmbeddedKafka, spark: SparkSession, tmp_path: Path, topic_name: Callable[[str], str]
) -> None:
    # Given a consumer that now accepts everything, and three dead letters of its route
    source = topic_name("src")
    record = tmp_path / "received.csv"
    with SimConsumerProcess(SimSettings(record=str(record))) as sim:
        route = {
            "name": source,
            "topic": source,
            "group": f"{source}-g",
            "endpoint": f"grpc://{sim.target}",
            "lanes": [{"delay": "1s"}],
        }
        run = PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "cp", spark=spark
        )
        create_dlq(run.config)
        specs = [
            Spec(5, b"k", b"replay-5", "dead: fixed now", BASE_MS),
            Spec(6, None, b"\xff\xfe", "dead: fixed now", BASE_MS),
            Spec(7, b"k", b"stay", "dead: still broken", BASE_MS),
        ]
        write_letters(run.config, specs)
        with run:
            # When the fixed ones are merged while the pipeline runs
            chosen = LetterFilter(reason="fixed")
            assert merge_letters(spark, scope_of(run.config), chosen, Target.LANE1) == 2
            # Then the consumer receives exactly them, under their original ids, attempt 2
            expected = {f"{source}/0/5", f"{source}/0/6"}

            def delivered() -> set[str]:
                return {r.delivery_id for r in read_records(record)} if record.exists() else set()

            wait_until(
                lambda: delivered() >= expected,
                timeout_s=90,
                what="merged letters delivered",
                check=run.check,
            )
        received = read_records(record)
        assert {r.delivery_id for r in received} == expected
        assert {r.attempt for r in received} == {2}
