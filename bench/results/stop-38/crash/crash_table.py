"""One table row per run folder here:
``python bench/results/stop-38/crash/crash_table.py [RUN ...]``.

Besides stop 36's columns: the seconds from the consumer's first restart to the pill's second
death (the first it dies alone), and how many times the consumer received the pill (from the
consumer's record file the runner keeps: one receipt per death when every death is the pill's).
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PILL_SEQ = "1000"  # bench/workloads/crash_pill.py: count // 3 of 3,000


def ms(value: Any) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def pill_receipts(name: str) -> str:
    files = [f for f in (HERE / name / "records").glob("*crash-*.csv*") if "none" not in f.name]
    if not files:
        return "n/a"
    with gzip.open(files[0], "rt") if files[0].suffix == ".gz" else files[0].open() as f:
        return str(sum(1 for row in csv.reader(f) if len(row) > 4 and row[4] == PILL_SEQ))


def row(name: str) -> str:
    entry = json.loads((HERE / name / "latest.json").read_text())["workloads"][0]
    w, n = entry["with_pill"], entry["without_pill"]
    t = w.get("timeline") or {}
    deaths, restarts = t.get("deaths_s") or [], t.get("restarts_s") or []
    gap = f"{deaths[1] - restarts[0]:.1f}" if len(deaths) > 1 and restarts else "n/a"
    return (
        f"| {name} | {w['deaths']} | {pill_receipts(name)} | {gap}"
        f" | {w['seconds_first_death_to_conviction']}"
        f" | {w['during_isolation_messages']}"
        f" | {ms(w['during_isolation_p50_ms'])} / {ms(w['during_isolation_p99_ms'])}"
        f" | {ms(w['p50_ms'])} / {ms(w['p99_ms'])} | {ms(n['p50_ms'])} / {ms(n['p99_ms'])}"
        f" | {w['duplicate_deliveries']} | {w['innocent_in_dlq']} |"
    )


def main(names: list[str]) -> None:
    names = names or sorted(p.name for p in HERE.iterdir() if (p / "latest.json").exists())
    print(
        "| run | deaths | pill receipts | s from 1st restart to 2nd death | s to conviction"
        " | isolated msgs | isolated p50 / p99 ms | all p50 / p99 ms | no pill p50 / p99 ms"
        " | duplicates | innocents in DLQ |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        print(row(name))


if __name__ == "__main__":
    main(sys.argv[1:])
