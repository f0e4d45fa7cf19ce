"""The in-process harness writes a valid siding.toml; the trigger can stay at the default."""

from __future__ import annotations

from siding.config import parse_config
from siding.config.sections import SparkConfig
from siding.devkit.harness import config_text

ROUTE = {"name": "r", "topic": "t", "group": "g", "endpoint": "http://127.0.0.1:8080/"}


def test_the_harness_trigger_is_200ms_unless_told() -> None:
    config = parse_config(config_text("127.0.0.1:9092", ROUTE, checkpoint_dir="/tmp/c"))
    assert config.spark.trigger == 0.2


def test_no_trigger_leaves_the_config_default() -> None:
    text = config_text("127.0.0.1:9092", ROUTE, checkpoint_dir="/tmp/c", trigger=None)
    assert "trigger" not in text
    config = parse_config(text)
    assert config.spark.trigger == SparkConfig().trigger
