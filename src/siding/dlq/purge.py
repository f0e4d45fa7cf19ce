"""``siding dlq purge``: mark matching dead letters purged, so no later command shows them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from siding.dlq.fate import Fate
from siding.dlq.filters import LetterFilter
from siding.dlq.read import DlqScope, select_letters
from siding.dlq.settle import Settlement, settle
from siding.errors import DlqError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def count_letters(spark: SparkSession, scope: DlqScope, chosen: LetterFilter) -> int:
    return select_letters(spark, scope, chosen).count()


def purge_letters(
    spark: SparkSession,
    scope: DlqScope,
    chosen: LetterFilter,
    *,
    confirmed: bool,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Purge the matching visible letters; without ``confirmed`` refuse, saying how many."""
    frame = select_letters(spark, scope, chosen)
    total = frame.count()
    if not confirmed and total:
        raise DlqError(
            f"refusing to purge {total} dead letter(s) of route {scope.route.name} without --yes"
        )
    if on_start is not None:
        on_start(total)
    plan = Settlement(Fate.PURGED, "purge", extra={"matched": total})
    return settle(scope, frame, chosen, plan, on_progress=on_progress, clock=clock)
