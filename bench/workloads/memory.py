"""Reading a soak's memory: the JVM's heap from ``jstat -gc``, its class histogram from ``jcmd``,
and the verdict on an RSS series (flat, or by how much it grew). Pure functions; the soak
(``bench/soak.py``) runs the tools and samples the tree.

RSS counts a page in every process that maps it: the Python workers Spark forks from one daemon
share the pages of what the daemon imported, so the tree's summed RSS counts those once per
worker. PSS (proportional set size, ``/proc/<pid>/smaps_rollup``) charges a shared page to each
of its N processes by 1/N: summed over the tree it is the memory the tree holds."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# jstat -gc columns (KB): survivor 0/1, eden, old: capacity (committed) and used; metaspace.
_HEAP_COMMITTED = ("S0C", "S1C", "EC", "OC")
_HEAP_USED = ("S0U", "S1U", "EU", "OU")


@dataclass(frozen=True, slots=True)
class Heap:
    used_mb: float
    committed_mb: float
    metaspace_mb: float
    full_gcs: int


def parse_pss_kb(smaps_rollup: str) -> int:
    """The ``Pss:`` line of a ``/proc/<pid>/smaps_rollup`` (kB); ValueError when absent."""
    for line in smaps_rollup.splitlines():
        name, _, rest = line.partition(":")
        if name == "Pss":
            return int(rest.split()[0])
    raise ValueError("no Pss line in smaps_rollup")


def parse_jstat_gc(text: str) -> Heap:
    """``jstat -gc PID``'s two lines (a header of column names, a line of values)."""
    lines = [line.split() for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 2:
        raise ValueError(f"jstat -gc gave no values: {text.strip()!r}")
    values = dict(zip(lines[0], lines[-1], strict=False))
    missing = [c for c in (*_HEAP_COMMITTED, *_HEAP_USED, "MU") if c not in values]
    if missing:
        raise ValueError(f"jstat -gc lacks the columns {missing}: {text.strip()!r}")

    def kb(cols: Sequence[str]) -> float:
        return sum(float(values[c]) for c in cols)

    return Heap(
        used_mb=round(kb(_HEAP_USED) / 1024, 1),
        committed_mb=round(kb(_HEAP_COMMITTED) / 1024, 1),
        metaspace_mb=round(float(values["MU"]) / 1024, 1),
        full_gcs=int(values.get("FGC", "0").split(".")[0] or 0),
    )


def parse_class_histogram(text: str) -> dict[str, tuple[int, int]]:
    """``jcmd PID GC.class_histogram``: class name -> (instances, bytes)."""
    found: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        # " 1:   12345   678900  java.lang.String (java.base@17)"
        if len(parts) >= 4 and parts[0].endswith(":") and parts[0][:-1].isdigit():
            found[parts[3]] = (int(parts[1]), int(parts[2]))
    return found


def grown_classes(
    before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]], top: int = 15
) -> list[dict[str, object]]:
    """The classes whose live bytes grew most between two histograms, largest growth first."""
    rows = []
    for name, (count, size) in after.items():
        was_count, was_size = before.get(name, (0, 0))
        if size > was_size:
            rows.append(
                {
                    "class": name,
                    "bytes_before": was_size,
                    "bytes_after": size,
                    "instances_before": was_count,
                    "instances_after": count,
                }
            )
    rows.sort(key=lambda r: int(str(r["bytes_after"])) - int(str(r["bytes_before"])), reverse=True)
    return rows[:top]


@dataclass(frozen=True, slots=True)
class Flatness:
    """Growth over a window: the median of its first ``step_s`` against the highest median of
    any later ``step_s`` (a step up counts, one sample's spike does not)."""

    window_start_s: float
    window_end_s: float
    start_mb: float
    highest_mb: float
    end_mb: float
    growth: float  # (highest - start) / start
    flat: bool


def flatness(
    series: Sequence[tuple[float, float]],
    window: tuple[float, float],
    step_s: float = 30.0,
    limit: float = 0.05,
) -> Flatness:
    """``series`` of (seconds, MB); ``window`` (from, to) in the same seconds. Flat when the
    growth is under ``limit``."""
    start, end = window
    inside = [(t, mb) for t, mb in series if start <= t <= end]
    if not inside:
        raise ValueError(f"no samples between {start:.0f}s and {end:.0f}s")
    medians: list[float] = []
    left = start
    while left < end:
        chunk = [mb for t, mb in inside if left <= t < left + step_s]
        if chunk:
            medians.append(statistics.median(chunk))
        left += step_s
    first, highest, last = medians[0], max(medians), medians[-1]
    growth = (highest - first) / first if first else 0.0
    return Flatness(
        window_start_s=round(start, 1),
        window_end_s=round(end, 1),
        start_mb=round(first, 1),
        highest_mb=round(highest, 1),
        end_mb=round(last, 1),
        growth=round(growth, 4),
        flat=growth < limit,
    )


def last_two_thirds(traffic: tuple[float, float]) -> tuple[float, float]:
    """The window the memory target judges: the last two thirds of the traffic."""
    start, end = traffic
    return start + (end - start) / 3, end
