"""The Spark floor: what Spark itself needs to bring a Kafka record to Python on an executor.

The same pyspark, Kafka connector and session as siding (``local[2]``), the HOL traffic (3,000
records at 200 msg/s, 1 partition), trigger 0 s, and a Python step on the executors that only
notes each record's arrival (``floor_probe``). Several executor paths are measured; the fastest
(by p50) is the floor. For each: p50/p99 of produce -> arrival, and the median trigger with its
``durationMs`` breakdown from ``StreamingQueryProgress``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bench.workloads import floor_probe, hol
from bench.workloads.context import BenchContext, scaled
from bench.workloads.measure import latencies_ms, rounded_percentile
from bench.workloads.traffic import RecordTail, start_producer, traffic_ids, wait_received
from siding.devkit.sim_consumer import read_records
from siding.devkit.sim_produce import new_producer, produce
from siding.devkit.wait import WaitTimeout, wait_until
from siding.model import delivery_id
from siding.pipeline.driver.source import source_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

READY_TIMEOUT_S = 180.0
DONE_TIMEOUT_S = 120.0
DURATION_KEYS = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "walCommit",
    "addBatch",
    "commitOffsets",
)
Sink = Callable[["DataFrame", str], "DataStreamWriter"]


def _foreach(df: DataFrame, path: str) -> DataStreamWriter:
    note = functools.partial(floor_probe.note_rows, path)
    return df.writeStream.foreach(lambda row: note([row]))


def _foreach_batch_partitions(df: DataFrame, path: str) -> DataStreamWriter:
    note = functools.partial(floor_probe.note_rows, path)
    return df.writeStream.foreachBatch(lambda batch, _id: batch.rdd.foreachPartition(note))


def _foreach_batch_arrow(df: DataFrame, path: str) -> DataStreamWriter:
    note = functools.partial(floor_probe.note_arrow, path)

    def write(batch: DataFrame, _id: int) -> None:
        batch.mapInArrow(note, "n long").write.format("noop").mode("overwrite").save()

    return df.writeStream.foreachBatch(write)


PATHS: dict[str, Sink] = {
    "foreach": _foreach,
    "foreachBatch + rdd.foreachPartition": _foreach_batch_partitions,
    "foreachBatch + mapInArrow (noop sink)": _foreach_batch_arrow,
}


def trigger_profile(progresses: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median ``durationMs`` (each key) over the triggers that read records, leaving out the
    first one (it carries the query's start); pure, over ``StreamingQueryProgress`` JSON."""
    with_rows = sorted(
        (p for p in progresses if int(p.get("numInputRows") or 0) > 0),
        key=lambda p: int(p["batchId"]),
    )[1:]
    medians: dict[str, float] = {}
    for key in DURATION_KEYS:
        values = [float(p["durationMs"][key]) for p in with_rows if key in p.get("durationMs", {})]
        if values:
            medians[key] = round(statistics.median(values), 1)
    rows = [int(p["numInputRows"]) for p in with_rows]
    return {
        "batches": len(with_rows),
        "median_rows_per_batch": statistics.median(rows) if rows else None,
        "trigger_median_ms": medians.get("triggerExecution"),
        "duration_ms_median": medians,
    }


class ProgressLog:
    """Every ``StreamingQueryProgress`` of a query, by batch id (polled: Spark keeps only the
    most recent ones)."""

    def __init__(self, query: Any) -> None:
        self._query = query
        self.by_batch: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="floor-progress", daemon=True)

    def collect(self) -> int:
        """Take in the query's recent progress; the rows read by all triggers seen so far."""
        recent = [json.loads(progress.json) for progress in self._query.recentProgress]
        with self._lock:
            self.by_batch.update((int(data["batchId"]), data) for data in recent)
            return sum(int(p.get("numInputRows") or 0) for p in self.by_batch.values())

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.collect()

    def __enter__(self) -> ProgressLog:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.collect()


def measure_path(ctx: BenchContext, name: str, sink: Sink, count: int) -> dict[str, Any]:
    topic = ctx.topic("floor")
    producer = new_producer(ctx.bootstrap)
    produce(ctx.bootstrap, topic, 1, producer=producer)  # the warm-up, left out of the numbers
    record = ctx.record_file(topic)
    record.touch()
    options = source_options(
        {"kafka.bootstrap.servers": ctx.bootstrap},
        topic,
        starting="earliest",
        min_partitions=0,
        max_offsets_per_trigger=10_000,
    )
    df = ctx.spark.readStream.format("kafka").options(**options).load()
    rows = df.select("topic", "partition", "offset", "headers")
    writer = sink(rows, str(record)).trigger(processingTime="0 seconds")
    checkpoint = ctx.workdir / f"checkpoints-floor-{topic}"
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    tail = RecordTail(record)

    def check() -> None:
        if (error := query.exception()) is not None:
            raise RuntimeError(f"floor query ({name}) failed: {error}")

    try:
        with ProgressLog(query) as progress:
            if not wait_received(tail, {delivery_id(topic, 0, 0)}, READY_TIMEOUT_S, check):
                raise TimeoutError(f"floor ({name}): no warm-up record in {READY_TIMEOUT_S:g}s")
            started = time.monotonic()
            start_producer(ctx, topic, count, hol.RATE, producer).join()
            expected = traffic_ids(topic, count)
            complete = wait_received(tail, expected, DONE_TIMEOUT_S, check)
            seconds = time.monotonic() - started
            # The last trigger reports its progress after its commit, a little after arrival.
            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: progress.collect() >= count + 1, timeout_s=30.0, check=check)
    finally:
        query.stop()
    latencies = latencies_ms(read_records(record), expected)
    return {
        "path": name,
        "p50_ms": rounded_percentile(latencies, 50),
        "p99_ms": rounded_percentile(latencies, 99),
        "arrived": len(latencies),
        "complete": complete,
        "seconds": round(seconds, 1),
        **trigger_profile(list(progress.by_batch.values())),
    }


def fastest(paths: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The path with the lowest p50 among those that completed."""
    done = [p for p in paths if p.get("complete") and p.get("p50_ms") is not None]
    return min(done, key=lambda p: float(p["p50_ms"])) if done else None


def run(ctx: BenchContext) -> list[dict[str, Any]]:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(floor_probe)  # type: ignore[no-untyped-call]
    count = scaled(hol.MESSAGES, ctx.scale, floor=400)
    paths: list[dict[str, Any]] = []
    for name, sink in PATHS.items():
        try:
            paths.append(measure_path(ctx, name, sink, count))
        except Exception as exc:  # one failed path must not hide the others
            paths.append({"path": name, "error": f"{type(exc).__name__}: {exc}"})
    best = fastest(paths)
    entry: dict[str, Any] = {
        "name": "spark_floor",
        "messages": count,
        "floor_path": best["path"] if best else None,
        "p50_ms": best["p50_ms"] if best else None,
        "p99_ms": best["p99_ms"] if best else None,
        "trigger_median_ms": best["trigger_median_ms"] if best else None,
        "paths": paths,
        "settings": {
            "rate_msgs_per_s": hol.RATE,
            "trigger": "0 seconds",
            "master": ctx.master,
            "source": "kafka, the options siding uses (includeHeaders, maxOffsetsPerTrigger)",
        },
    }
    if best is None:
        entry["error"] = "no floor path completed: " + "; ".join(
            f"{p['path']}: {p.get('error', 'incomplete')}" for p in paths
        )
    return [entry]
