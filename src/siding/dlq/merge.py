"""``siding dlq merge``: replay matching dead letters into retry lane 1 or the source topic."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from siding.dlq.fate import Fate
from siding.dlq.filters import LetterFilter
from siding.dlq.read import DlqScope, select_letters
from siding.dlq.replay import Letter, Target, destination, replay_record
from siding.dlq.settle import Settlement, settle
from siding.routing.producer import OutRecord

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def merge_letters(
    spark: SparkSession,
    scope: DlqScope,
    chosen: LetterFilter,
    target: Target,
    *,
    rate: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Replay the matching visible letters and mark them merged; how many were replayed."""
    frame = select_letters(spark, scope, chosen)
    total = frame.count()
    if on_start is not None:
        on_start(total)
    route = scope.route

    def replay(letter: Letter, now_ms: int) -> OutRecord:
        return replay_record(letter, target, route, now_ms)

    plan = Settlement(
        Fate.MERGED,
        "merge",
        replay=replay,
        to=destination(target, route),
        rate=rate,
        extra={"target": target.value, "matched": total},
    )
    return settle(scope, frame, chosen, plan, on_progress=on_progress, clock=clock)
