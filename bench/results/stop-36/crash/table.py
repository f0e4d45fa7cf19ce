"""One table row per run folder here: ``python bench/results/stop-36/crash/table.py [RUN ...]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def ms(value: Any) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def row(name: str) -> str:
    entry = json.loads((HERE / name / "latest.json").read_text())["workloads"][0]
    w, n = entry["with_pill"], entry["without_pill"]
    return (
        f"| {name} | {w['deaths']} | {w['seconds_first_death_to_conviction']}"
        f" | {w['during_isolation_messages']}"
        f" | {ms(w['during_isolation_p50_ms'])} / {ms(w['during_isolation_p99_ms'])}"
        f" | {ms(w['p50_ms'])} / {ms(w['p99_ms'])} | {ms(n['p50_ms'])} / {ms(n['p99_ms'])}"
        f" | {w['duplicate_deliveries']} | {w['innocent_in_dlq']} |"
    )


def main(names: list[str]) -> None:
    names = names or sorted(p.name for p in HERE.iterdir() if (p / "latest.json").exists())
    print(
        "| run | deaths | s to conviction | isolated msgs | isolated p50 / p99 ms"
        " | all p50 / p99 ms | no pill p50 / p99 ms | duplicates | innocents in DLQ |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        print(row(name))


if __name__ == "__main__":
    main(sys.argv[1:])
