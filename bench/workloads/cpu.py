"""CPU seconds of a process tree from /proc, leaving out chosen subtrees (Linux only)."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    ppid: int
    ticks: int  # utime + stime + cutime + cstime: reaped children stay counted


def parse_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat line; the command name may itself hold spaces and parentheses."""
    pid, _, rest = text.partition(" (")
    fields = rest[rest.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14-17.
    return ProcStat(int(pid), int(fields[1]), sum(int(f) for f in fields[11:15]))


def tree_ticks(stats: Mapping[int, ProcStat], root: int, exclude: Collection[int]) -> int:
    """Ticks of ``root`` and its descendants, without the subtrees rooted at ``exclude``."""
    children: dict[int, list[int]] = {}
    for s in stats.values():
        children.setdefault(s.ppid, []).append(s.pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in exclude or pid not in stats:
            continue
        total += stats[pid].ticks
        todo.extend(children.get(pid, ()))
    return total


def read_stats(proc: Path = Path("/proc")) -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = parse_stat((entry / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked
            stats[stat.pid] = stat
    return stats


def tree_cpu_s(root: int, exclude: Collection[int]) -> float:
    return tree_ticks(read_stats(), root, exclude) / TICKS_PER_S


def children_of(pid: int, stats: Mapping[int, ProcStat] | None = None) -> set[int]:
    return {s.pid for s in (stats or read_stats()).values() if s.ppid == pid}
