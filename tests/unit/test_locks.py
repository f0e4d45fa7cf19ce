"""requirements/runtime.txt pins exactly what siding needs to run (executors install only it);
requirements/dev.txt adds the test, lint and bench tools on top, nothing twice."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements"
# The venv's own installers, which locks leave to the venv (as pip-compile does).
UNPINNED = {"pip", "setuptools", "wheel"}
DEV_TOOLS = {"pytest", "mypy", "ruff", "hypothesis", "import-linter", "grpcio-tools", "matplotlib"}


def _local(line: str) -> tuple[str, str]:
    """A project in this repository (``./sdk/python``): its name and version."""
    project = tomllib.loads((ROOT / line / "pyproject.toml").read_text())["project"]
    return canonicalize_name(project["name"]), project["version"]


def _pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line.startswith("./"):
            name, version = _local(line)
            pins[name] = version
        elif line and not line.startswith("-r"):
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line} is not pinned"
            pins[canonicalize_name(name)] = version
    return pins


def _applies(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def _closure(roots: list[str]) -> dict[str, str]:
    """Every installed distribution ``roots`` need, with its installed version."""
    todo = [Requirement(r) for r in roots]
    found: dict[str, str] = {}
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found or name in UNPINNED or not _applies(requirement):
            continue
        distribution = metadata.distribution(requirement.name)
        found[name] = distribution.version
        todo += [Requirement(r) for r in distribution.requires or ()]
    return found


def _project() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {"runtime": project["dependencies"], "extras": [r for e in extras.values() for r in e]}


def test_the_runtime_lock_is_the_closure_of_the_projects_dependencies() -> None:
    assert _pins(REQUIREMENTS / "runtime.txt") == _closure(_project()["runtime"])


def test_the_dev_lock_adds_the_extras_on_top_of_the_runtime_lock() -> None:
    runtime, dev = _pins(REQUIREMENTS / "runtime.txt"), _pins(REQUIREMENTS / "dev.txt")
    assert "-r runtime.txt" in (REQUIREMENTS / "dev.txt").read_text().splitlines()
    assert not set(runtime) & set(dev)
    extras = _closure(_project()["extras"])
    assert {n: v for n, v in extras.items() if n not in runtime} == dev


def test_no_development_tool_is_in_the_runtime_lock() -> None:
    assert not DEV_TOOLS & set(_pins(REQUIREMENTS / "runtime.txt"))
    assert set(_pins(REQUIREMENTS / "dev.txt")) >= DEV_TOOLS
