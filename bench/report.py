"""The benchmark report: ``latest.json`` (plus a timestamped copy) and ``latest.md``."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
Entry = Mapping[str, Any]

# (field, label) per workload; "baselines.x" reads inside the entry's baselines.
_ROWS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "partition_scalability": (
        ("msgs/s", "siding_msgs_per_s", "", "baselines.serial_consumer_msgs_per_s"),
        ("bound msgs/s", "bound_msgs_per_s", "", ""),
    ),
    "pc_table": (
        (
            "seconds",
            "siding_seconds",
            "baselines.parallel_consumer_seconds",
            "baselines.serial_consumer_seconds",
        ),
    ),
    "hol": (
        ("fast p50 ms", "fast_p50_ms", "", "baselines.serial_consumer_fast_p50_ms"),
        ("fast p99 ms", "fast_p99_ms", "", "baselines.serial_consumer_fast_p99_ms"),
        ("fast p99 ms, no slow msgs", "fast_p99_ms_without_slow", "", ""),
    ),
    "poison_pills": (
        ("msgs/s", "siding_msgs_per_s", "", ""),
        ("msgs/s, no poison", "siding_msgs_per_s_without_poison", "", ""),
        ("DLQ exact / lost", "dlq_exact+lost", "", ""),
    ),
    "cost": (
        ("CPU s per 1,000 msgs", "cpu_s_per_1000", "", ""),
        ("transport floor", "floor_cpu_s_per_1000", "", ""),
    ),
}


def machine() -> str:
    """Cores, RAM, CPU model, OS, Python and Java versions, as one line."""
    cpu = "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists() and (m := re.search(r"model name\s*:\s*(.+)", info.read_text())):
        cpu = m.group(1).strip()
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
        java = (done.stderr.splitlines() or ["?"])[0].replace('"', "")
    except OSError:
        java = "no java"
    return (
        f"{os.cpu_count()} cores, {ram_gib:.1f} GiB RAM, {cpu}, {platform.system()}"
        f" {platform.release()}, Python {platform.python_version()}, {java}"
    )


def field(entry: Entry, path: str) -> Any:
    if path == "dlq_exact+lost":
        return f"{entry.get('dlq_exact')} / {entry.get('lost')}"
    value: Any = entry
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def markdown(report: Entry) -> str:
    lines = [
        f"Machine: {report['machine']}  ",
        f"Command: `make bench` (scale {report.get('scale', 1)}), {report.get('when', '')}",
        "",
        "| workload | messages | metric | siding | Parallel Consumer | serial consumer |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for entry in report["workloads"]:
        name = entry["name"]
        if "error" in entry:
            lines.append(
                f"| {name} | {entry.get('messages') or ''} | error: {entry['error']} | | | |"
            )
            continue
        rows = _ROWS.get("pc_table" if name.startswith("pc_table_") else name, ())
        for label, mine, peer, serial in rows:
            values = [cell(field(entry, p)) if p else "" for p in (mine, peer, serial)]
            lines.append(f"| {name} | {entry['messages']} | {label} | " + " | ".join(values) + " |")
    notes = [n for e in report["workloads"] for n in entry_notes(e)]
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def entry_notes(entry: Entry) -> list[str]:
    """Footnotes the table needs to be read honestly."""
    name, base = entry["name"], entry.get("baselines") or {}
    notes = [f"{name}: {note}" for note in entry.get("notes", [])]
    if base.get("parallel_consumer_error"):
        notes.append(f"{name}: Parallel Consumer not run: {base['parallel_consumer_error']}")
    if base.get("serial_consumer_extrapolated"):
        measured = base.get("serial_consumer_measured_messages")
        window = base.get("serial_consumer_window_s")
        notes.append(f"{name}: serial consumer extrapolated from {measured} messages in {window} s")
    return [f"- {n}" for n in notes]


def build_report(
    machine_text: str, entries: Sequence[Entry], scale: float, when: float
) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    return {"machine": machine_text, "when": stamp, "scale": scale, "workloads": list(entries)}


def write(report: Entry, folder: Path = RESULTS) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2) + "\n"
    stamp = str(report["when"]).replace(":", "").replace("-", "")
    paths = [folder / "latest.json", folder / f"bench-{stamp}.json", folder / "latest.md"]
    for path, content in zip(paths, (text, text, markdown(report)), strict=True):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(content)
        tmp.replace(path)
    return paths
