"""Makes the driver JVM's class-data archive (``siding jars archive``, ``siding.jvmarchive``).

A short Spark run in a process of its own: a batch job with a shuffle, a Python task, a streaming
query with a checkpoint, and Kafka's source resolved, so the JVM loads the classes a route's
start loads; its JVM writes them at its exit into a temporary file that is renamed into place
only once complete, so a start never maps half an archive.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siding import jvmarchive
from siding.errors import SetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_JVM_EXIT_S = 300.0
_STREAM_BATCHES = 3


def make(target: Path) -> Path:
    """Write the archive to ``target`` (a fresh process does the Spark run); ``target``. One
    maker at a time per target (a lock file beside it); what a killed one left is removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f"{target.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for left in target.parent.glob(f"{target.name}.*.part"):
            left.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "siding.pipeline.driver.archive", str(target)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not target.is_file():
        raise SetupError(f"the class-data archive was not made ({_why(done.stderr)})")
    return target


def _why(stderr: str) -> str:
    """The JVM's own reason when it gave one (its last "Caused by"), else the last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    causes = [line for line in lines if line.startswith("Caused by:")]
    return (causes or lines or ["no output"])[-1]


def _workload(spark: SparkSession, work: Path) -> None:
    """What loads the classes a route's start loads."""
    spark.range(2_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    spark.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).sum()
    kafka = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
    kafka.option("subscribe", "siding-archive").load().schema  # noqa: B018 (resolves the source)
    seen: list[int] = []

    def each(frame: Any, batch_id: int) -> None:
        frame.count()
        seen.append(batch_id)

    rate = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    writer = rate.writeStream.foreachBatch(each).option("checkpointLocation", str(work / "ckpt"))
    query = writer.trigger(processingTime="200 milliseconds").start()
    deadline = time.monotonic() + 120
    while len(seen) < _STREAM_BATCHES and time.monotonic() < deadline and query.isActive:
        time.sleep(0.1)
    query.stop()


def _run(target: Path) -> None:
    from siding.pipeline.driver.session import build_session

    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    partial.unlink(missing_ok=True)
    spark = build_session(
        "local[2]", app_name="siding-archive", driver_options=jvmarchive.dump_options(partial)
    )
    try:
        with tempfile.TemporaryDirectory(prefix="siding-archive-") as work:
            _workload(spark, Path(work))
    finally:
        gateway = spark.sparkContext._gateway
        spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes.
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        proc.stdin.close()
        proc.wait(timeout=_JVM_EXIT_S)
    if not partial.is_file() or partial.stat().st_size == 0:
        raise SetupError(f"the JVM wrote no archive to {partial}")
    partial.replace(target)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m siding.pipeline.driver.archive TARGET.jsa", file=sys.stderr)
        return 2
    try:
        _run(Path(argv[0]))
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
