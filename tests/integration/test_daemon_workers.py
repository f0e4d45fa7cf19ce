"""Spark forks siding's Python workers from siding's daemon (issue 29, cost): a new worker
imports neither pyspark nor siding's task code itself, and pyspark comes from the installed
package, not compiled again from Spark's zip."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this module is imported by the workers too: nothing more at run time
    from pyspark.sql import SparkSession

# Packages whose import is what a new worker paid before (a module of any other package, the
# test's own, may be imported by the worker: it is not task code).
TASK_CODE = ("siding", "pyspark", "py4j", "grpc", "google", "confluent_kafka", "aiohttp")


def started_at() -> float:
    """When this process started (seconds since the epoch, from /proc)."""
    ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    boot = next(
        float(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _imports(since: float) -> Callable[[Iterable[int]], Iterator[tuple[str, int, bool, list[str]]]]:
    def run(_rows: Iterable[int]) -> Iterator[tuple[str, int, bool, list[str]]]:
        import pyspark

        from siding.pipeline.executor import daemon, warm

        warm.warm(0)  # the task code's own start (the worker's runtime)
        fresh = set(sys.modules) - daemon.PRELOADED
        yield (
            pyspark.__file__ or "",
            len(daemon.PRELOADED),
            # a worker this job started (in the suite, Spark may reuse the idle workers of
            # earlier tests, which imported what their own tasks needed since)
            started_at() >= since,
            sorted(m for m in fresh if m.split(".")[0] in TASK_CODE),
        )

    return run


def test_new_workers_start_with_the_task_code_imported(spark: SparkSession) -> None:
    # When tasks run in Python workers (two slots: at least two workers; new ones unless Spark
    # reuses the idle workers of an earlier test of the same session)
    since = time.time() - 0.05  # /proc's start times are in clock ticks
    job = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_imports(since))
    for pyspark_file, preloaded, new, fresh in job.collect():
        # Then each was forked from siding's daemon, which imported the task code
        assert preloaded > 0
        # and a new one imported none of it itself
        if new:
            assert fresh == [], fresh
        # and pyspark came from the installed package (with its compiled modules)
        assert ".zip" not in pyspark_file, pyspark_file
