"""Confluent Parallel Consumer as a peer: build the Java programs in ``parallel-consumer/`` once
(``mvn -q package`` into its ignored ``target/``) and run them against the benchmark's broker.

``Main`` processes in-process (it sleeps); ``VertxMain`` is Parallel Consumer over the network:
its Vert.x module POSTs each record to the benchmark's HTTP receiver.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.peers.common import PeerProcess, PeerUnavailable, is_stale, last_json_line
from siding.jvm import project_root, require_java, require_tool

__all__ = [
    "PeerRun",
    "PeerUnavailable",
    "build",
    "is_stale",
    "retry_process",
    "run",
    "run_vertx",
    "vertx_process",
]

PROJECT = Path(__file__).parent / "parallel-consumer"
MAIN_CLASS = "dev.siding.bench.Main"
VERTX_CLASS = "dev.siding.bench.VertxMain"
RETRY_CLASS = "dev.siding.bench.RetryMain"
_JAVA = PROJECT / "src/main/java/dev/siding/bench"
_SOURCES = (
    PROJECT / "pom.xml",
    _JAVA / "Main.java",
    _JAVA / "VertxMain.java",
    _JAVA / "RetryMain.java",
)
_BUILT = (
    PROJECT / "target/classes/dev/siding/bench/Main.class",
    PROJECT / "target/classes/dev/siding/bench/VertxMain.class",
    PROJECT / "target/classes/dev/siding/bench/RetryMain.class",
)


@dataclass(frozen=True, slots=True)
class PeerRun:
    seconds: float
    total_seconds: float


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


def _answer(done: subprocess.CompletedProcess[str], what: str) -> PeerRun:
    answer = last_json_line(done.stdout)
    if done.returncode != 0 or "seconds" not in answer:
        reason = answer.get("error") or done.stderr.strip().splitlines()[-1:] or "no output"
        raise PeerUnavailable(f"parallel consumer {what} exited {done.returncode}: {reason}")
    return PeerRun(float(answer["seconds"]), float(answer["total_seconds"]))


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
    return _answer(done, mode)


def vertx_command(
    classpath: str,
    bootstrap: str,
    topic: str,
    url: str,
    *,
    mode: str,
    concurrency: int,
    count: int,
    timeout_s: float,
) -> list[str]:
    return [
        require_java(), "-cp", classpath, VERTX_CLASS, bootstrap, topic, mode, str(concurrency),
        str(count), url, str(int(timeout_s)),
    ]  # fmt: skip


def run_vertx(
    classpath: str,
    bootstrap: str,
    topic: str,
    url: str,
    *,
    mode: str,
    concurrency: int,
    count: int,
    timeout_s: float = 300.0,
) -> PeerRun:
    """Parallel Consumer over the network until ``count`` records of ``topic`` were answered."""
    command = vertx_command(
        classpath, bootstrap, topic, url, mode=mode, concurrency=concurrency, count=count,
        timeout_s=timeout_s,
    )  # fmt: skip
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=timeout_s + 60
    )
    return _answer(done, f"vertx {mode}")


def vertx_process(
    classpath: str,
    bootstrap: str,
    topic: str,
    url: str,
    workdir: Path,
    *,
    concurrency: int,
    count: int,
    timeout_s: float,
) -> PeerProcess:
    """Parallel Consumer over the network (unordered) as a ``PeerProcess`` that exits by itself
    once ``count`` records were answered."""
    command = vertx_command(
        classpath, bootstrap, topic, url, mode="UNORDERED", concurrency=concurrency, count=count,
        timeout_s=timeout_s,
    )  # fmt: skip
    return PeerProcess(command, "parallel-consumer-vertx", workdir, expect_exit=True)


def retry_process(
    classpath: str,
    bootstrap: str,
    topic: str,
    url: str,
    workdir: Path,
    *,
    mode: str,
    concurrency: int,
    count: int,
    retry_delay_s: float,
    timeout_s: float,
) -> PeerProcess:
    """Parallel Consumer with its own retries (``RetryMain``): blocking HTTP calls to ``url``, a
    non-2xx answer retried after ``retry_delay_s``; exits once ``count`` records were answered."""
    command = [
        require_java(), "-cp", classpath, RETRY_CLASS, bootstrap, topic, mode, str(concurrency),
        str(count), url, str(round(retry_delay_s * 1000)), str(int(timeout_s)),
    ]  # fmt: skip
    return PeerProcess(command, "parallel-consumer-retry", workdir, expect_exit=True)
