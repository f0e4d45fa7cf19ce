"""Proportional memory (PSS, MiB) and CPU seconds of a process and all its descendants:
``python -m bench.pod_memory.process_tree PID`` prints ``pss_mib cpu_s processes``."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def descendants(root: int, parents: dict[int, int]) -> list[int]:
    """Pure: ``root`` and every process below it, from a pid -> parent pid map."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # the fields after the command's name


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(_stat(int(entry))[1])
            except OSError:
                continue
    return parents


def measure(root: int) -> tuple[int, float, int]:
    """PSS in MiB (shared pages split between the processes that share them, so forked Python
    workers are not counted twice), CPU seconds (user + system) and the process count."""
    pss_kib, cpu_s = 0, 0.0
    tree = descendants(root, _parents())
    tick = os.sysconf("SC_CLK_TCK")
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss_kib += int(line.split()[1])
            fields = _stat(pid)
            cpu_s += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
    return pss_kib // 1024, cpu_s, len(tree)


if __name__ == "__main__":
    pss, cpu, count = measure(int(sys.argv[1]))
    print(f"{pss} {cpu:.2f} {count}")
