"""The peers' pure parts: the rebuild rule, output parsing, Benthos's generated config."""

from __future__ import annotations

import os
from pathlib import Path

from bench.peers import benthos
from bench.peers.common import is_stale, last_json_line, output_tail


def _touch(path: Path, mtime: float) -> Path:
    path.write_text("x")
    os.utime(path, (mtime, mtime))
    return path


def test_a_peer_is_rebuilt_when_an_output_is_missing_or_older_than_a_source(
    tmp_path: Path,
) -> None:
    source = _touch(tmp_path / "main.go", 100.0)
    binary = tmp_path / "bin"
    assert is_stale(binary, [source])
    _touch(binary, 200.0)
    assert not is_stale(binary, [source])
    _touch(source, 300.0)
    assert is_stale(binary, [source])


def test_every_output_must_be_newer_than_the_sources(tmp_path: Path) -> None:
    source = _touch(tmp_path / "Main.java", 100.0)
    old, new = _touch(tmp_path / "A.class", 50.0), _touch(tmp_path / "B.class", 200.0)
    assert is_stale([old, new], [source])
    assert is_stale([new, tmp_path / "missing.class"], [source])
    assert not is_stale([new], [source])


def test_output_tail_keeps_the_last_lines_on_one_line() -> None:
    text = "a\n\nb\nc\n  d  \n"
    assert output_tail(text, lines=2) == "c | d"
    assert output_tail("") == "no output"


def test_last_json_line_skips_other_output() -> None:
    text = 'starting\n{"seconds": 1.5}\nnoise {\n{"error": "x"}\n{broken\n'
    assert last_json_line(text) == {"error": "x"}
    assert last_json_line("no json here") == {}


def test_benthos_config_reads_the_topic_and_posts_each_record_with_its_delivery_id() -> None:
    config = benthos.config(
        "127.0.0.1:9092", "orders", "g1", "http://127.0.0.1:8080/", in_flight=1000
    )
    source = config["input"]["kafka_franz"]
    assert source["seed_brokers"] == ["127.0.0.1:9092"]
    assert (source["topics"], source["consumer_group"]) == (["orders"], "g1")
    assert source["checkpoint_limit"] == 1000
    out = config["output"]["http_client"]
    assert (out["url"], out["verb"], out["max_in_flight"]) == (
        "http://127.0.0.1:8080/",
        "POST",
        1000,
    )
    # topic/partition/offset, as siding's webhook-id, and the producer's sim-* headers
    assert out["headers"]["webhook-id"] == benthos.DELIVERY_ID
    for part in ("kafka_topic", "kafka_partition", "kafka_offset"):
        assert part in benthos.DELIVERY_ID
    assert out["metadata"]["include_prefixes"] == ["sim-"]
