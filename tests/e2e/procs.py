"""What a test sees of `siding run`'s process tree, from /proc: its descendants (Spark's JVM and
its Python workers) and whether one is still alive."""

from __future__ import annotations

from pathlib import Path

from siding.pipeline.executor import daemon

# Spark's Python daemon and the workers it forks carry its module in their command line:
# siding's (spark.python.daemon.module) or pyspark's own, which siding's falls back to.
PYTHON_DAEMONS = (daemon.__name__.encode(), b"pyspark.daemon")


def python_daemon_or_worker(command: bytes) -> bool:
    """Whether ``command`` (a /proc cmdline) is Spark's Python daemon or one of its workers."""
    return any(name in command for name in PYTHON_DAEMONS)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it ended while we looked
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"
