"""A query's progress as the group-commit listener reads it: from Spark's JSON of it."""

from __future__ import annotations

import json

from siding.pipeline.driver.commits import progress_from_json
from siding.pipeline.driver.source import end_offsets, topics_in

# Spark's JSON of a Kafka source's progress; the rates Spark could not compute (NaN) are left
# out, as StreamingQueryProgress.json leaves them out.
SPARK_JSON = {
    "id": "4a1c9f1e-9f0d-4c5e-8f0e-1b2c3d4e5f60",
    "runId": "5b2d0a2f-0a1e-4d6f-9a1f-2c3d4e5f6071",
    "name": "siding.billing.main",
    "timestamp": "2026-11-28T09:00:00.000Z",
    "batchId": 41,
    "batchDuration": 120,
    "numInputRows": 3,
    "durationMs": {"triggerExecution": 120},
    "stateOperators": [],
    "sources": [
        {
            "description": "KafkaV2[Subscribe[orders]]",
            "startOffset": {"orders": {"0": 7, "1": 2}},
            "endOffset": {"orders": {"0": 9, "1": 3}},
            "latestOffset": {"orders": {"0": 9, "1": 3}},
            "numInputRows": 3,
            "metrics": {},
        }
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
}


def test_the_progress_keeps_the_name_the_batch_and_each_sources_end() -> None:
    progress = progress_from_json(json.dumps(SPARK_JSON))
    assert progress.name == "siding.billing.main"
    assert progress.batchId == 41
    (source,) = progress.sources
    assert end_offsets(source.endOffset, "orders") == {0: 9, 1: 3}
    assert topics_in(source.endOffset) == ("orders",)


def test_a_source_without_an_end_and_a_query_without_sources_read_as_nothing() -> None:
    no_end = {**SPARK_JSON, "sources": [{"description": "x", "endOffset": None}]}
    assert progress_from_json(json.dumps(no_end)).sources[0].endOffset is None
    rate = {**SPARK_JSON, "sources": [{"description": "RateStreamV2", "endOffset": 120}]}
    assert progress_from_json(json.dumps(rate)).sources[0].endOffset == "120"
    bare = {"name": None, "batchId": 0}
    assert progress_from_json(json.dumps(bare)).sources == ()
