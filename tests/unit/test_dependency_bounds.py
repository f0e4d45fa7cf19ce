"""The lower bounds of the proxy's and the thin SDK's pyproject.toml admit no version the
committed generated code refuses."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "sdk" / "python" / "src" / "siding_consumer" / "v1"
PROJECTS = [ROOT / "pyproject.toml", ROOT / "sdk" / "python" / "pyproject.toml"]


def _requirements(pyproject: Path) -> dict[str, Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
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


@pytest.mark.parametrize("pyproject", PROJECTS, ids=["proxy", "sdk"])
def test_protobuf_is_at_least_the_version_that_generated_the_code(pyproject: Path) -> None:
    needed = _generated_version("consumer_pb2.py", r"Protobuf Python Version: (\S+)")
    protobuf = _requirements(pyproject)["protobuf"]
    assert _lowest_allowed(protobuf) >= needed
    # The runtime refuses gencode of another major version.
    assert Version(f"{needed.major + 1}") not in protobuf.specifier


@pytest.mark.parametrize("pyproject", PROJECTS, ids=["proxy", "sdk"])
def test_grpcio_is_at_least_the_version_the_generated_stub_checks(pyproject: Path) -> None:
    needed = _generated_version("consumer_pb2_grpc.py", r"GRPC_GENERATED_VERSION = '([^']+)'")
    requirements = _requirements(pyproject)
    assert _lowest_allowed(requirements["grpcio"]) >= needed
    assert _lowest_allowed(requirements["grpcio-health-checking"]) >= needed
