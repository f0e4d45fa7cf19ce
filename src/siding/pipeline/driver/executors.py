"""How many executors a route's budget is shared among (docs/dispatch.md, "One budget")."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext


def executor_count(sc: SparkContext) -> int:
    """The executors registered now: 1 in local mode (one process tree on one machine); on a
    cluster, the block managers Spark knows less the driver's (at least 1)."""
    if (sc.master or "local").startswith("local"):
        return 1
    status = sc._jsc.sc().getExecutorMemoryStatus()
    return max(1, int(status.size()) - 1)
