"""The order the suite's files go to xdist's workers (tests/schedule.py)."""

from __future__ import annotations

from pathlib import Path

from tests.schedule import file_seconds, load_table, longest_first


def test_the_longest_files_go_first_and_the_others_keep_their_order() -> None:
    paths = ["a.py", "b.py", "a.py", "c.py", "d.py", "e.py"]
    seconds = {"c.py": 300.0, "e.py": 20.0, "b.py": 20.0}
    assert longest_first(paths, seconds) == ["c.py", "b.py", "e.py", "a.py", "d.py"]


def test_a_junit_report_gives_seconds_per_file_from_the_listed_size_on(tmp_path: Path) -> None:
    report = tmp_path / "results.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.e2e.test_x" name="one" time="30.4"/>'
        '<testcase classname="tests.e2e.test_x" name="two" time="12.3"/>'
        '<testcase classname="tests.unit.test_y" name="three" time="0.2"/>'
        "</testsuite></testsuites>"
    )
    assert file_seconds(str(report)) == {"tests/e2e/test_x.py": 43}


def test_the_table_names_files_that_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    table = load_table()
    assert table and all((root / path).is_file() for path in table)
