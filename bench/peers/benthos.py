"""Redpanda Connect's engine (Benthos 4.27) as a peer: ``kafka_franz`` in, ``http_client`` out.

``benthos/main.go`` imports the engine with only the components the benchmark needs; the bench
builds it with ``go build`` into the ignored ``benthos/target/`` (rebuilt when its sources
change; ``make test`` never builds it) and runs it with a config written here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bench.peers.common import PeerProcess, PeerUnavailable, is_stale, output_tail
from siding.jvm import require_tool

PROJECT = Path(__file__).parent / "benthos"
BINARY = PROJECT / "target" / "benthos-peer"
_SOURCES = (PROJECT / "main.go", PROJECT / "go.mod", PROJECT / "go.sum")
BUILD_TIMEOUT_S = 900.0
# The delivery id siding uses (topic/partition/offset), from kafka_franz's metadata.
DELIVERY_ID = '${! meta("kafka_topic") }/${! meta("kafka_partition") }/${! meta("kafka_offset") }'


def build() -> Path:
    """The peer's binary, building it first when its sources changed (about two minutes)."""
    if is_stale(BINARY, _SOURCES):
        go = require_tool("go", "Go 1.21+ (e.g. `apt-get install golang`)")
        command = [go, "build", "-buildvcs=false", "-o", str(BINARY), "."]
        try:
            done = subprocess.run(
                command,
                cwd=PROJECT,
                check=False,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise PeerUnavailable(f"go build took longer than {BUILD_TIMEOUT_S:g}s") from exc
        if done.returncode != 0:
            raise PeerUnavailable(f"go build failed: {output_tail(done.stdout + done.stderr)}")
    return BINARY


def config(bootstrap: str, topic: str, group: str, url: str, *, in_flight: int) -> dict[str, Any]:
    """The pipeline: read ``topic`` (up to ``in_flight`` records of a partition unacknowledged),
    POST each record to ``url`` (up to ``in_flight`` requests at once) with its delivery id and
    the producer's ``sim-*`` headers. JSON, which Benthos reads as YAML."""
    return {
        "http": {"enabled": False},
        "logger": {"level": "WARN"},
        "metrics": {"none": {}},
        "input": {
            "kafka_franz": {
                "seed_brokers": [bootstrap],
                "topics": [topic],
                "consumer_group": group,
                "checkpoint_limit": in_flight,
                "start_from_oldest": True,
            }
        },
        "output": {
            "http_client": {
                "url": url,
                "verb": "POST",
                "headers": {"webhook-id": DELIVERY_ID},
                "metadata": {"include_prefixes": ["sim-"]},
                "max_in_flight": in_flight,
            }
        },
    }


def process(binary: Path, settings: dict[str, Any], workdir: Path) -> PeerProcess:
    """The peer as a ``PeerProcess`` running ``settings`` (enter it to start)."""
    path = workdir / f"benthos-{settings['input']['kafka_franz']['consumer_group']}.json"
    path.write_text(json.dumps(settings, indent=2))
    return PeerProcess([str(binary), "-c", str(path)], "benthos", workdir)
