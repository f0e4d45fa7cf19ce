"""pyproject.toml's lower bounds admit no version the committed generated code refuses."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "src" / "siding" / "v1"


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    parsed = (Requirement(line) for line in project["dependencies"])
    return {r.name: r for r in parsed}


def _lowest_allowed(requirement: Requirement) -> Version:
    lows = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
    assert lows, f"{requirement} has no lower bound"
    return max(lows)


def _generated_version(file: str, pattern: str) -> Version:
    found = re.search(pattern, (GENERATED / file).read_text())
    assert found, f"no version in {file}"
    return Version(found.group(1))


def test_protobuf_is_at_least_the_version_that_generated_the_code() -> None:
    needed = _generated_version("consumer_pb2.py", r"Protobuf Python Version: (\S+)")
    protobuf = _requirements()["protobuf"]
    assert _lowest_allowed(protobuf) >= needed
    # The runtime refuses gencode of another major version.
    assert Version(f"{needed.major + 1}") not in protobuf.specifier


def test_grpcio_is_at_least_the_version_the_generated_stub_checks() -> None:
    needed = _generated_version("consumer_pb2_grpc.py", r"GRPC_GENERATED_VERSION = '([^']+)'")
    requirements = _requirements()
    assert _lowest_allowed(requirements["grpcio"]) >= needed
    assert _lowest_allowed(requirements["grpcio-health-checking"]) >= needed
