"""Every ``siding ...`` command the README, docs and examples show exists, with its options."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from siding.cli import main
from siding.devkit.harness import config_text

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTS += sorted((ROOT / "examples").glob("*.toml"))
SEPARATORS = {"|", "/"}


def _cli() -> click.Group:
    main._register()
    return main.cli


def _mentions() -> list[tuple[str, str]]:
    """(where, command text) for each ``siding <command> ...`` in backticks or on a code line."""
    names = "|".join(re.escape(name) for name in _cli().commands)
    inline = re.compile(rf"`(?:\.venv/bin/)?siding ((?:{names})\b[^`]*)`")
    line = re.compile(rf"^\s*(?:#\s*)?(?:\S+=\S+\s+)*(?:\.venv/bin/)?siding ((?:{names})\b.*)$")
    found = []
    for document in DOCUMENTS:
        for number, text in enumerate(document.read_text().splitlines(), 1):
            where = f"{document.relative_to(ROOT)}:{number}"
            found += [(where, m.group(1)) for m in inline.finditer(text)]
            if (m := line.match(text)) and "`" not in m.group(1):
                found.append((where, m.group(1).split(" #")[0]))
    return found


def _option_names(command: click.Command) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)} | {
        "-h",
        "--help",
    }


def _commands(group: click.Command, words: list[str]) -> tuple[list[click.Command], list[str]]:
    """The command(s) ``words`` name (``a | b`` names both), and the words left."""
    chosen = [group]
    # A group may take options of its own (`siding jars --from DIR`): they end the command.
    while words and not words[0].startswith("-") and isinstance(chosen[0], click.Group):
        names = [words.pop(0)]
        while len(words) >= 2 and words[0] in SEPARATORS:
            names.append(words[1])
            del words[:2]
        groups = [c for c in chosen if isinstance(c, click.Group)]
        missing = [n for n in names if any(n not in g.commands for g in groups)]
        assert not missing, f"no such command: {missing}"
        chosen = [g.commands[n] for g in groups for n in names]
    return chosen, words


MENTIONS = _mentions()


def test_the_documents_mention_commands() -> None:
    assert len(MENTIONS) > 20
    assert any(text.startswith("check-config") for _, text in MENTIONS)


@pytest.mark.parametrize(("where", "text"), MENTIONS, ids=[w for w, _ in MENTIONS])
def test_a_documented_command_and_its_options_exist(where: str, text: str) -> None:
    commands, rest = _commands(_cli(), text.split())
    options = [w.strip("[]").split("=")[0] for w in rest if w.strip("[").startswith("-")]
    options = [o for option in options for o in option.split("/")]
    for command in commands:
        unknown = [o for o in options if o not in _option_names(command)]
        assert not unknown, f"{where}: `siding {text}`: {command.name} has no {unknown}"


def test_check_config_takes_the_file_as_run_does_or_as_an_argument(tmp_path: Path) -> None:
    config = tmp_path / "siding.toml"
    route = {"name": "r", "topic": "t", "group": "g", "endpoint": "grpc://127.0.0.1:1"}
    config.write_text(config_text("127.0.0.1:9092", route, checkpoint_dir=tmp_path / "ck"))
    runner = CliRunner()
    for args in (["-c", str(config)], [str(config)], ["--config", str(config)]):
        result = runner.invoke(_cli(), ["check-config", *args])
        assert result.exit_code == 0, result.output
        assert "ok: 1 route(s)" in result.output
    both = runner.invoke(_cli(), ["check-config", str(config), "-c", str(tmp_path / "x.toml")])
    assert both.exit_code == 2
