"""A standby's Python workers made ready before it takes a route over (executor side).

A new driver's first batch waits for Spark to start Python workers and for each to import
siding's task code (gRPC, the Kafka client, the dispatch window); a standby has time for that
while it waits on the fence. ``warm`` runs as one task per slot: the workers stay in Spark's
pool (``spark.python.worker.reuse``) and the route's first tasks find them ready.
"""

from __future__ import annotations

import os
import time

from siding.pipeline.executor import park_task, task  # noqa: F401 (loaded: the point)
from siding.pipeline.executor.worker import runtime

# Long enough that the slots' tasks overlap, so that each gets a worker of its own.
HOLD_S = 0.5


def warm(_slot: int) -> int:
    """Start the worker's runtime (this module's imports are the task code's); the worker's
    pid."""
    runtime()
    time.sleep(HOLD_S)
    return os.getpid()
