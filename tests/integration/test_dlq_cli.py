"""``siding dlq`` through the real entry point: messages and exit codes, never a stack trace."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from siding.cli.main import main
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import config_text
from tests.integration.dlq_support import BASE_MS, Spec, create_dlq, make_config, write_letters

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _siding(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["siding", *args])
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture
def toml(kafka: EmbeddedKafka, tmp_path: Path, topic_name: Callable[[str], str]) -> Path:
    source = topic_name("src")
    route = {"name": source, "topic": source, "group": "g", "endpoint": "grpc://127.0.0.1:9"}
    path = tmp_path / "siding.toml"
    path.write_text(config_text(kafka.bootstrap, route, checkpoint_dir=tmp_path))
    return path


def _route(path: Path) -> str:
    return next(
        line.split('"')[1] for line in path.read_text().splitlines() if line.startswith("name")
    )


def test_missing_dlq_topic_is_one_line_error(
    toml: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    route = _route(toml)
    assert _siding(monkeypatch, "dlq", "list", "-c", str(toml), "--route", route) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"error: DLQ topic siding.{route}.dlq of route {route} does not exist"


def test_empty_dlq_says_so_and_exits_zero(
    kafka: EmbeddedKafka,
    toml: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    route = _route(toml)
    create_dlq(make_config(kafka.bootstrap, route))
    for command in ("list", "stats", "merge", "purge"):
        args = ["dlq", command, "-c", str(toml), "--route", route]
        assert _siding(monkeypatch, *args, *(["--to", "origin"] if command == "merge" else [])) == 0
        assert "no dead letters" in capsys.readouterr().err


def test_list_json_purge_refusal_and_bad_filters(
    kafka: EmbeddedKafka,
    spark: SparkSession,  # noqa: ARG001 (the CLI reuses the running session)
    toml: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    route = _route(toml)
    config = make_config(kafka.bootstrap, route, lanes=False)
    write_letters(config, [Spec(n, b"\xc3\x28", b"\xff" * 40, "dead", BASE_MS) for n in range(3)])
    common = ["-c", str(toml), "--route", route]
    assert _siding(monkeypatch, "dlq", "list", *common, "--format", "json") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["offset"] for line in lines] == [0, 1, 2]
    assert lines[0]["key"] == "hex:c328"
    assert lines[0]["value_preview"].startswith("<binary 40 bytes: ffff")
    assert _siding(monkeypatch, "dlq", "purge", *common) == 1
    assert "refusing to purge 3 dead letter(s)" in capsys.readouterr().err
    assert _siding(monkeypatch, "dlq", "merge", *common) == 1
    assert "use --to origin" in capsys.readouterr().err
    assert _siding(monkeypatch, "dlq", "list", *common, "--since", "yesterday") == 1
    assert "is not a time" in capsys.readouterr().err
    assert _siding(monkeypatch, "dlq", "merge", *common, "--to", "origin", "--dry-run") == 0
    assert "would merge 3 dead letter(s)" in capsys.readouterr().out
    assert _siding(monkeypatch, "dlq", "purge", *common, "--yes") == 0
    assert "purged 3 dead letter(s)" in capsys.readouterr().out
    assert _siding(monkeypatch, "dlq", "list", *common) == 0
    assert "no dead letters match" in capsys.readouterr().err
