"""A standby warms its Python workers before it takes a route over (issue 28: the first batch
of a new driver waited for new Python workers): the route's first tasks run in them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from siding.pipeline.driver.warm import warm_workers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _pid(_rows: Iterable[int]) -> Iterator[int]:
    yield os.getpid()


def test_a_batchs_tasks_run_in_the_workers_the_warm_up_started(spark: SparkSession) -> None:
    # Given a session of two task slots whose Python workers were warmed: one per slot
    context = spark.sparkContext
    assert context.master == "local[2]"
    warmed = warm_workers(spark)
    assert len(warmed) == 2
    # When a batch's tasks run (more tasks than slots)
    ran = set(context.parallelize(range(16), 8).mapPartitions(_pid).collect())
    # Then they all ran in the warmed workers: none had to be started
    assert ran <= warmed, (ran, warmed)
