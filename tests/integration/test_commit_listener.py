"""The group-commit listener on a real streaming query: each progress reaches it read from its
JSON, and reading it throws nothing in the JVM (pyspark's own bridge threw about five Java
exceptions per progress, each classified with reflection walks over the whole class path)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, cast

import pytest

from siding.pipeline.driver.commits import CommitTarget, make_listener

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_progress_reaches_the_listener_without_a_java_exception(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.errors.exceptions import captured

    thrown: list[str] = []
    convert = captured.convert_exception

    def counting(error: Any) -> Any:
        thrown.append(str(error.toString())[:120])
        return convert(error)

    monkeypatch.setattr(captured, "convert_exception", counting)
    seen: list[tuple[str, int, str]] = []
    committed: list[int] = []
    lock = threading.Lock()

    def progressed(name: str, progress: Any) -> None:
        with lock:
            seen.append((name, progress.batchId, progress.sources[0].endOffset))

    query_name = "siding.listener-test.main"
    listener = make_listener(
        cast(Any, None),  # nothing to commit: a rate source has no topics
        {query_name: CommitTarget("a-group", "a-topic")},
        progressed,
        lambda _name, batch_id: committed.append(batch_id),
    )
    spark.streams.addListener(listener)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .writeStream.queryName(query_name)
        .foreachBatch(lambda _frame, _batch_id: None)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len(committed) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
        listener.release()
    assert len(committed) >= 5
    with lock:
        names = {name for name, _, _ in seen}
        batch_ids = [batch_id for _, batch_id, _ in seen]
        offsets = [offset for _, _, offset in seen]
    assert names == {query_name}
    assert batch_ids == sorted(batch_ids) and len(set(batch_ids)) == len(batch_ids)
    assert all(isinstance(b, int) for b in batch_ids)
    assert all(offset and offset != "None" for offset in offsets)  # the source's end offset
    assert thrown == []
