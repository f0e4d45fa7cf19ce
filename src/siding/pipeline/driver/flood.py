"""The DLQ-flood guard, per batch (docs/dispatch.md, "DLQ-flood guard").

A batch's tasks deliver and write every outcome except their dead letters, which they hand to
the driver with their counts; the driver adds the tasks' counts up and either writes the letters
(acknowledged by Kafka before the batch may commit) or stops the route with none of them written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from siding.config import RouteConfig
from siding.dispatch.guard import flood_exceeded
from siding.pipeline.executor.result import TaskResult
from siding.steps import StepCounts


def flood_reason(route: RouteConfig, where: str, results: Sequence[TaskResult]) -> str | None:
    """Pure: the line the route stops with when too large a share of the batch is DEAD, else
    ``None``. The share is of every record the batch settled, over all its tasks."""
    counts = StepCounts.total(r.counts for r in results)
    dead, total = counts.to_dlq, counts.records
    ratio = route.dlq_flood_ratio
    if not flood_exceeded(dead, total, ratio, route.dlq_flood_min_batch):
        return None
    reasons: Counter[str] = Counter()
    for result in results:
        reasons.update(result.dead_reasons)
    most = ", ".join(f"{label} {n}" for label, n in reasons.most_common(2))
    return (
        f"{where}: {dead} of {total} records turned DEAD ({dead / total:.0%}), more than"
        f" dlq_flood_ratio = {ratio:g}; none was dead-lettered and the batch is not committed"
        f" (reasons: {most}); fix the consumer, then start siding again"
    )
