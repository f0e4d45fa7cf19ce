"""The SDK is thin: it needs gRPC and protobuf only, and importing it pulls in nothing else of
siding's (no Spark, no Kafka client, no proxy)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
ALLOWED = {"grpcio", "grpcio-health-checking", "protobuf"}
HEAVY = ("pyspark", "py4j", "confluent_kafka", "siding", "pydantic", "aiohttp")

_PROBE = """
import json, sys
import siding_consumer, siding_consumer.envelope, siding_consumer.webhook
print(json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
"""


def test_the_distribution_depends_on_grpc_and_protobuf_only() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["name"] == "siding-consumer"
    names = {re.split(r"[\s<>=!~;\[]", r)[0] for r in project["dependencies"]}
    assert names == ALLOWED


def test_importing_the_sdk_loads_nothing_of_the_proxy() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True
    ).stdout
    loaded = set(json.loads(out))
    assert "siding_consumer" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
