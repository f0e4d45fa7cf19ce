"""Spark forks siding's Python workers from siding's daemon (issue 29, cost): a new worker
imports neither pyspark nor siding's task code itself, and pyspark comes from the installed
package, not compiled again from Spark's zip."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this module is imported by the workers too: nothing more at run time
    from pyspark.sql import SparkSession

# Packages whose import is what a new worker paid before (a module of any other package, the
# test's own, may be imported by the worker: it is not task code).
TASK_CODE = ("siding", "pyspark", "py4j", "grpc", "google", "confluent_kafka", "aiohttp")


def _imports(_rows: Iterable[int]) -> Iterator[tuple[str, int, list[str]]]:
    import pyspark

    from siding.pipeline.executor import daemon, warm

    warm.warm(0)  # the task code's own start (the worker's runtime)
    fresh = set(sys.modules) - daemon.PRELOADED
    yield (
        pyspark.__file__ or "",
        len(daemon.PRELOADED),
        sorted(m for m in fresh if m.split(".")[0] in TASK_CODE),
    )


def test_new_workers_start_with_the_task_code_imported(spark: SparkSession) -> None:
    # When tasks run in new Python workers (two slots: at least two workers)
    seen = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_imports).collect()
    for pyspark_file, preloaded, fresh in seen:
        # Then each was forked from siding's daemon, which imported the task code
        assert preloaded > 0
        # and imported none of it itself
        assert fresh == [], fresh
        # and pyspark came from the installed package (with its compiled modules)
        assert ".zip" not in pyspark_file, pyspark_file
