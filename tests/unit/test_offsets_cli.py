"""``siding offsets``: what the table says, and targets refused before anything is read."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from rich.console import Console

from siding.cli import main
from siding.cli.offsets import _notes, _table
from siding.config import parse_config
from siding.kafka.admin import Committed
from siding.pipeline.offline import offset_log, positions, storage
from siding.pipeline.offline.moves import RouteOffsets

CONFIG = """
[kafka]
bootstrap = "127.0.0.1:1"
[spark]
checkpoint_dir = "/ck"
[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://127.0.0.1:2"
"""


def _view(position: offset_log.Position | None, running: str | None = None) -> RouteOffsets:
    route = parse_config(CONFIG).route[0]
    group = {0: Committed(10230, positions.mark("batch=1412")), 1: Committed(9000, "")}
    extents = {0: (0, 10410), 1: (0, 10002)}
    where = storage.place("/ck/billing")
    return RouteOffsets(route, where, extents, position, group, running, False)


def _text(view: RouteOffsets, chosen: dict[int, int] | None = None) -> str:
    planned = positions.plan(view.extents, view.checkpoint, view.group, chosen)
    console = Console(record=True, width=120)
    console.print(_table(view, planned, moving=chosen is not None))
    for note in _notes(view, planned):
        console.print(note)
    return console.export_text()


POSITION = offset_log.Position(1412, {"trips": {0: 10230, 1: 9876}}, pending=1413, next_batch=1414)


def test_show_says_where_each_partition_stands_and_what_is_odd() -> None:
    text = _text(_view(POSITION, running="siding run of route billing (pid 7 on h, since t)"))
    assert "checkpoint /ck/billing/main (batch 1412)" in text
    assert "9000 (other)" in text and " 180 " in text and " 126 " in text  # lag from checkpoint
    assert "running: siding run of route billing (pid 7" in text
    assert "batch 1413 was not committed: it runs again first" in text
    assert "the group was moved by another tool on partition(s) 1" in text


def test_a_dry_run_shows_old_new_and_the_change() -> None:
    text = _text(_view(POSITION), {0: 1200})
    row = next(line for line in text.splitlines() if line.startswith("│         0"))
    assert row.split("│")[1:-1] == [
        "         0 ",
        "      10230 ",
        "        10230 ",
        "         0 ",
        "   10410 ",
        " 1200 ",
        "  -9030 ",
    ]


def test_without_a_checkpoint_the_table_says_so() -> None:
    assert "no checkpoint position yet" in _text(_view(None))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give exactly one of --to-earliest"),
        (["--to-earliest", "--to-latest"], "give exactly one of"),
        (["--to-latest", "--dry-run", "--execute"], "--dry-run and --execute exclude each other"),
    ],
)
def test_a_reset_needs_exactly_one_target(args: list[str], message: str) -> None:
    main._register()
    result = CliRunner().invoke(main.cli, ["offsets", "reset", "--route", "billing", *args])
    assert result.exit_code == 2
    assert message in result.output
