"""Start and warm a standby's Python workers while it waits on the fence (driver side;
``siding.pipeline.executor.warm`` is what each runs)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from siding.pipeline.executor.warm import warm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def warm_workers(spark: SparkSession) -> set[int]:
    """Short overlapping tasks (``defaultParallelism`` of them, at least one per slot), so
    that every slot's Python worker is started and has imported the task code; the workers'
    pids. A failure here only costs the time it saved (logged; no pids)."""
    context = spark.sparkContext
    slots = max(1, context.defaultParallelism)
    started = time.monotonic()
    try:
        pids = context.parallelize(range(slots), slots).map(warm).collect()
    except Exception as exc:  # best effort: the route starts its workers itself
        log.warning("siding: Python workers not warmed: %s", exc)
        return set()
    log.info(
        "siding: %d Python worker(s) warmed in %.1f s",
        len(set(pids)),
        time.monotonic() - started,
    )
    return set(pids)


# Spark stops a Python worker that has been idle for a minute (PythonWorkerFactory, checked every
# 10 s): a standby waiting longer warms its workers again before that.
WARM_EVERY_S = 40.0


@contextlib.contextmanager
def kept_warm(warm: Callable[[], object], every_s: float = WARM_EVERY_S) -> Iterator[None]:
    """Call ``warm`` now, then every ``every_s`` on a thread of its own while the body runs
    (a standby's wait on the fence, however long)."""
    warm()
    done = threading.Event()

    def again() -> None:
        while not done.wait(every_s):
            warm()

    thread = threading.Thread(target=again, name="siding-keep-warm", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=every_s)
