"""foreachBatch glue for a route's park lane, on the driver (docs/parking.md).

A batch of parked records waits briefly for their calls' settlements, then its tasks finish
each record from its answer, deliver again the ones whose call is lost, and put back the rest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from siding import naming
from siding.errors import DurableWriteError
from siding.pipeline.driver.batch import BatchHandler, checked, log
from siding.pipeline.driver.executors import executor_count
from siding.pipeline.driver.settlements import SettlementStore
from siding.pipeline.executor.park_task import settle_partition
from siding.pipeline.executor.result import TaskResult
from siding.pipeline.executor.rows import SELECT_EXPR
from siding.routing import story

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# How long a park-lane batch waits for calls still running before it puts them back.
ANSWER_WAIT_S = 1.0
POLL_S = 0.05


TOKEN_EXPRS = (
    f"{story.sql_field(story.PARK_TOKEN)} AS token",
    f"try_cast({story.sql_field(story.NOT_BEFORE)} as long) AS nb",
)


@dataclass(kw_only=True)
class ParkBatchHandler(BatchHandler):
    settlements: SettlementStore
    lane: int = field(default=naming.PARK_LANE, init=False)
    _used: tuple[str, ...] = ()

    def _wait_to_start(self, frame: DataFrame) -> None:
        pass  # it waits for its calls' answers once started (_wait_for_answers)

    def _deliver(self, frame: DataFrame, batch_id: int) -> list[TaskResult]:
        # Spark runs a batch only after the one before was committed: its used settlements
        # can go now (a replay of that batch would still have needed them).
        self._forget(self._used)
        marks: list[Any] = frame.selectExpr(*TOKEN_EXPRS).collect()
        due = {str(row["token"]): int(row["nb"] or 0) for row in marks if row["token"]}
        tokens = set(due)
        self._wait_for_answers(due)
        # The calls the main and retry lanes parked that have answered now need no wait at a drain.
        self.drain.settle(self.route.name, self.settlements.of)
        rows = frame.selectExpr(*SELECT_EXPR)
        rdd = rows.rdd
        plan = self._plan(
            max(rdd.getNumPartitions(), 1),
            {},
            settlements=self.settlements.of(tokens),
            executors=executor_count(rdd.context),
            batch_id=batch_id,
        )

        def run() -> list[TaskResult]:
            results: list[TaskResult] = rdd.mapPartitionsWithIndex(settle_partition(plan)).collect()
            return checked(results)

        results = self._run_with_retries(run, batch_id)
        results = self._settle_letters(results, batch_id)
        self._used = tuple(t for r in results for t in r.used_tokens)
        return results

    def _wait_for_answers(self, due: Mapping[str, int]) -> None:
        """Until every call answered, one is due without an answer, or ANSWER_WAIT_S passed."""
        give_up = time.monotonic() + ANSWER_WAIT_S
        while True:
            self.settlements.catch_up()
            answered = self.settlements.of(due)
            missing = [nb for token, nb in due.items() if token not in answered]
            if not missing:
                return
            if time.time() * 1000 >= min(missing) or time.monotonic() >= give_up:
                return
            if self.drain.requested.wait(POLL_S):
                return

    def _forget(self, tokens: tuple[str, ...]) -> None:
        try:
            self.settlements.forget(tokens)
        except DurableWriteError as exc:  # tombstones only keep the topic small
            log.warning("route %s: settlements not forgotten yet: %s", self.route.name, exc)
