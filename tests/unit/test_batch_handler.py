"""What every batch of a route's query does around its own work (driver/batch.BatchHandler)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from siding import naming
from siding.config import parse_config
from siding.pipeline.driver.batch import BatchFailed, BatchHandler, BatchSink
from siding.pipeline.driver.park_batch import ParkBatchHandler
from siding.pipeline.driver.settlements import SettlementStore
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts
from tests.unit.test_config import BASE

ROUTE = parse_config(BASE, env={}).route[0]


@dataclass(kw_only=True)
class Scripted(BatchHandler):
    """Its own work is to return ``results`` (or raise ``error``), recording the order of steps."""

    results: list[TaskResult] = field(default_factory=list)
    error: Exception | None = None
    steps: list[str] = field(default_factory=list)

    def _wait_to_start(self, frame: Any) -> None:  # noqa: ARG002
        self.steps.append(f"wait: busy={self.drain.busy([self.query])}")

    def _deliver(self, frame: Any, batch_id: int) -> list[TaskResult]:  # noqa: ARG002
        self.steps.append(f"deliver: busy={self.drain.busy([self.query])}")
        if self.error is not None:
            raise self.error
        return self.results


def handler(**kwargs: Any) -> tuple[Scripted, list[tuple[str, int, list[TaskResult]]]]:
    reports: list[tuple[str, int, list[TaskResult]]] = []
    sink = BatchSink(lambda route, lane, results, _s: reports.append((route, lane, results)))
    made = Scripted(
        route=ROUTE, lane=2, client_conf={}, stop=threading.Event(), sink=sink, **kwargs
    )
    return made, reports


def test_a_batch_waits_before_the_drain_counts_it_and_reports_after() -> None:
    done = [TaskResult(counts=StepCounts(records=3, acked=3))]
    made, reports = handler(results=done)

    made._batch(object(), 7, lambda _ms: None)  # type: ignore[arg-type]

    assert made.steps == ["wait: busy=0", "deliver: busy=1"]
    assert made.drain.busy([made.query]) == 0
    assert reports == [(ROUTE.name, 2, done)]


def test_a_failed_batch_leaves_the_drain_and_reports_nothing() -> None:
    made, reports = handler(error=RuntimeError("boom"))

    with pytest.raises(RuntimeError):
        made._batch(object(), 7, lambda _ms: None)  # type: ignore[arg-type]

    assert made.drain.busy([made.query]) == 0
    assert reports == []


def test_the_query_and_the_failure_name_the_lane() -> None:
    made, _ = handler()
    made.stop.set()

    with pytest.raises(BatchFailed, match=f"route {ROUTE.name} lane 2 batch 9: stopping"):
        made._run_with_retries(lambda: None, 9)
    assert made.query == naming.query_name(ROUTE.name, 2)


def test_the_park_lane_is_named_as_such() -> None:
    store = SettlementStore("settled", list, lambda _records: None)
    park = ParkBatchHandler(route=ROUTE, client_conf={}, settlements=store, stop=threading.Event())
    park.stop.set()

    with pytest.raises(BatchFailed, match=f"route {ROUTE.name} park lane batch 4: stopping"):
        park._run_with_retries(lambda: None, 4)
    assert (park.lane, park.query) == (
        naming.PARK_LANE,
        naming.query_name(ROUTE.name, naming.PARK_LANE),
    )
