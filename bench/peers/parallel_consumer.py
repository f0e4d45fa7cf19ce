"""Confluent Parallel Consumer as a peer: build the Java program in ``parallel-consumer/`` once
(``mvn -q package`` into its ignored ``target/``) and run it against the benchmark's broker."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from siding.jvm import project_root, require_java, require_tool

PROJECT = Path(__file__).parent / "parallel-consumer"
MAIN_CLASS = "dev.siding.bench.Main"
_SOURCES = (PROJECT / "pom.xml", PROJECT / "src/main/java/dev/siding/bench/Main.java")
_BUILT = PROJECT / "target/classes/dev/siding/bench/Main.class"


class PeerUnavailable(Exception):
    """The peer could not be built or run; the message is the exact reason for the report."""


@dataclass(frozen=True, slots=True)
class PeerRun:
    seconds: float
    total_seconds: float


def is_stale(built: Path, sources: tuple[Path, ...]) -> bool:
    return not built.exists() or any(s.stat().st_mtime > built.stat().st_mtime for s in sources)


def build() -> str:
    """The peer's classpath, building it first when its sources changed."""
    if is_stale(_BUILT, _SOURCES):
        mvn = require_tool("mvn", "Apache Maven 3.6+ (e.g. `apt-get install maven`)")
        settings = project_root() / "jvm" / "maven-settings.xml"
        command = [mvn, "-B", "-q", "-gs", str(settings), "-f", str(PROJECT / "pom.xml"), "package"]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-6:])
            raise PeerUnavailable(f"mvn package failed: {tail}")
    return os.pathsep.join([str(PROJECT / "target/classes"), str(PROJECT / "target/lib/*")])


def run(
    classpath: str,
    bootstrap: str,
    topic: str,
    *,
    mode: str,
    concurrency: int,
    count: int,
    max_sleep_ms: float = 5.0,
    timeout_s: float = 300.0,
) -> PeerRun:
    java = require_java()
    command = [
        java, "-cp", classpath, MAIN_CLASS, bootstrap, topic, mode, str(concurrency), str(count),
        str(max_sleep_ms), str(int(timeout_s)),
    ]  # fmt: skip
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=timeout_s + 60
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    answer = json.loads(lines[-1]) if lines else {}
    if done.returncode != 0 or "seconds" not in answer:
        reason = answer.get("error") or done.stderr.strip().splitlines()[-1:] or "no output"
        raise PeerUnavailable(f"parallel consumer {mode} exited {done.returncode}: {reason}")
    return PeerRun(float(answer["seconds"]), float(answer["total_seconds"]))
