"""The order in which pytest-xdist hands test files to its workers: the longest first, so that the
two workers finish together instead of one running a five-minute file alone at the end (xdist's
own order, by number of tests, puts the one-test scenarios last). The seconds come from
``tests/file_seconds.json``: per file, from a `make test`'s JUnit XML; refresh it with
``python -m tests.schedule build/test-results.xml``. A file not in it counts 0 and keeps its
place among the others."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")
# Files under this many seconds keep the collection order: it is not worth a line in the table.
LISTED_FROM_S = 5.0


def longest_first(paths: Iterable[str], seconds: Mapping[str, float]) -> list[str]:
    """``paths`` (each once, in collection order) by ``seconds`` descending; ties and files not
    in ``seconds`` keep their order."""
    unique = list(dict.fromkeys(paths))
    return sorted(unique, key=lambda path: -seconds.get(path, 0.0))


def file_seconds(junit_xml: str) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests) in a JUnit XML report."""
    total: dict[str, float] = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        total[path] = total.get(path, 0.0) + float(case.get("time", "0"))
    ranked = sorted(total.items(), key=lambda item: -item[1])
    return {path: round(s) for path, s in ranked if s >= LISTED_FROM_S}


def load_table() -> dict[str, float]:
    if not TABLE.exists():
        return {}
    table: dict[str, float] = json.loads(TABLE.read_text())
    return table


if __name__ == "__main__":
    TABLE.write_text(json.dumps(file_seconds(sys.argv[1]), indent=1) + "\n")
