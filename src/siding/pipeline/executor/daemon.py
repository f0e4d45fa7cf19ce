"""The Python daemon Spark forks siding's workers from (``spark.python.daemon.module``).

Spark starts one daemon per worker pool and forks a Python worker from it for each task that
finds no idle worker. pyspark's own daemon imports nothing before it forks (its worker module
may start threads), so every new worker imported pyspark's worker and siding's task code
itself: about 1.9 CPU s each on a 2-core machine, most of it compiling pyspark from the
``pyspark.zip`` on Spark's ``PYTHONPATH`` (a zip holds no compiled modules) and siding's
modules. This daemon does that once, then runs pyspark's own: the workers it forks start with
every module a delivery task needs (docs/operations.md, "Spark's Python workers").

Only imports happen before the fork: no thread, gRPC channel, Kafka client or event loop
(``WorkerRuntime`` makes those in the worker, on its first task). Should an import ever start a
thread, a fork could copy a lock that thread holds: ``main`` then says so and becomes pyspark's
own daemon instead (nothing preloaded, as without this module).
"""

from __future__ import annotations

import gc
import importlib
import importlib.machinery
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

# What a delivery or park task runs, and the transports a route may use (a route's first task
# would import its transport's module otherwise). pyspark's worker module first: its imports are
# the bulk, and the task code's unpickling needs them.
PRELOAD = (
    "pyspark.daemon",
    "pyspark.worker",
    "siding.pipeline.executor.task",
    "siding.pipeline.executor.park_task",
    "siding.pipeline.executor.warm",
    "siding.transport.grpc_stream",
    "siding.transport.grpc_unary",
    "siding.transport.grpc_batch",
    "siding.transport.http",
    "siding.transport.http_batch",
)

# The modules the daemon had before it forked (each worker inherits them; tests compare).
PRELOADED: set[str] = set()


def installed_pyspark(path: Sequence[str]) -> str | None:
    """The folder of the pyspark package importable from ``path``'s folders (not its zips),
    or ``None``."""
    folders = [p for p in path if not p.endswith(".zip")]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", folders)
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def preferred_path(path: Sequence[str], installed: str | None) -> list[str]:
    """Pure: ``path`` with the zips that ship inside the installed pyspark package (its
    ``python/lib/pyspark.zip`` and py4j's, which Spark puts first on a worker's
    ``PYTHONPATH``) moved to the end, so that the same pyspark is imported from the installed
    package and its compiled modules instead. A zip from anywhere else (a Spark distribution's
    ``SPARK_HOME``, files a job added) keeps its place: the installed package may be another
    version."""
    if installed is None:
        return list(path)
    inside = Path(installed).resolve()

    def shipped(entry: str) -> bool:
        return entry.endswith(".zip") and Path(entry).resolve().is_relative_to(inside)

    return [p for p in path if not shipped(p)] + [p for p in path if shipped(p)]


def preload(modules: Sequence[str] = PRELOAD) -> frozenset[str]:
    """Import ``modules`` (pyspark from the installed package where it is the same one); the
    names of every module loaded then."""
    sys.path[:] = preferred_path(sys.path, installed_pyspark(sys.path))
    importlib.invalidate_caches()
    for name in modules:
        importlib.import_module(name)
    return frozenset(sys.modules)


def threads() -> int:
    """Threads of this process: the kernel's count where it tells it (threads a C library
    started too), else Python's."""
    tasks = Path("/proc/self/task")
    return len(os.listdir(tasks)) if tasks.is_dir() else threading.active_count()


def main() -> None:
    PRELOADED.update(preload())
    running = threads()
    if running != 1:
        print(
            f"siding daemon: {running} threads after its imports; forking from pyspark's own"
            " daemon instead (workers import their code themselves)",
            file=sys.stderr,
            flush=True,
        )
        # Nothing was written to Spark yet: pyspark's daemon takes over the same pipes.
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    # Objects that exist now live as long as the daemon: the workers' collections (pyspark's
    # daemon collects after every task of a reused worker) need not walk them again.
    gc.collect()
    gc.freeze()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    # Run as ``-m``: main runs in the module under its own name, where the workers find
    # ``PRELOADED``.
    importlib.import_module(__spec__.name).main()
