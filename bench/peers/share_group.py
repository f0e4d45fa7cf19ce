"""Kafka's own share groups (KIP-932, GA in Kafka 4.2) as a peer: the Java program in
``share-group/`` (the broker's own kafka-clients, 4.3.1), built once with ``mvn -q package``
into its ignored ``target/`` (rebuilt when its pom or source changes), run against the
benchmark's broker.

``ShareMain`` starts ``consumers`` threads, each a ``KafkaShareConsumer`` in one share group that
polls at most ``max_poll_records`` records (``share.acquire.mode=record_limit``), POSTs them all at
once to the receiver and acknowledges each explicitly: ACCEPT on a 2xx, RELEASE otherwise.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.peers.common import PeerProcess, PeerUnavailable, is_stale, output_tail
from siding.jvm import project_root, require_java, require_tool

PROJECT = Path(__file__).parent / "share-group"
MAIN_CLASS = "dev.siding.bench.share.ShareMain"
_JAVA = PROJECT / "src/main/java/dev/siding/bench/share"
_SOURCES = (PROJECT / "pom.xml", _JAVA / "ShareMain.java")
_BUILT = (PROJECT / "target/classes/dev/siding/bench/share/ShareMain.class",)


@dataclass(frozen=True, slots=True)
class Tuning:
    """How many share consumers, and how many records each takes per poll. A consumer waits for
    every answer of its poll before it acknowledges them and polls again, so at most
    ``consumers * max_poll_records`` records are in flight, and a slow record holds up the
    records polled with it."""

    consumers: int
    max_poll_records: int

    def __post_init__(self) -> None:
        if self.consumers < 1 or self.max_poll_records < 1:
            raise ValueError(f"share-group tuning needs at least 1 of each, got {self}")

    @property
    def in_flight(self) -> int:
        return self.consumers * self.max_poll_records


def for_slow_messages(rate: float, mean_service_s: float, headroom: float) -> Tuning:
    """Traffic where some records are slow: one record per poll (a slow record then holds up
    only its own consumer), and enough consumers for the records in flight at ``rate`` (Little's
    law: rate x mean service time) times ``headroom``."""
    if rate <= 0 or mean_service_s <= 0 or headroom < 1:
        raise ValueError("rate and service time must be positive, headroom at least 1")
    return Tuning(consumers=math.ceil(rate * mean_service_s * headroom), max_poll_records=1)


def for_backlog(in_flight: int, consumers: int) -> Tuning:
    """A backlog of equally quick records: no record holds up another much, so each consumer
    takes a big poll (few broker round trips) and ``consumers`` of them keep ``in_flight``
    records in flight, the same limit the other systems get."""
    if in_flight < 1 or consumers < 1:
        raise ValueError("in-flight and consumers must be at least 1")
    return Tuning(consumers=consumers, max_poll_records=math.ceil(in_flight / consumers))


def build() -> str:
    """The peer's classpath, building it first when its sources changed."""
    if is_stale(list(_BUILT), _SOURCES):
        mvn = require_tool("mvn", "Apache Maven 3.6+ (e.g. `apt-get install maven`)")
        settings = project_root() / "jvm" / "maven-settings.xml"
        command = [mvn, "-B", "-q", "-gs", str(settings), "-f", str(PROJECT / "pom.xml"), "package"]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise PeerUnavailable(f"mvn package failed: {output_tail(done.stdout + done.stderr)}")
    return os.pathsep.join([str(PROJECT / "target/classes"), str(PROJECT / "target/lib/*")])


def command(
    classpath: str, bootstrap: str, *, topic: str, group: str, url: str, tuning: Tuning
) -> list[str]:
    return [
        require_java(), "-cp", classpath, MAIN_CLASS, bootstrap, topic, group, url,
        str(tuning.consumers), str(tuning.max_poll_records),
    ]  # fmt: skip


def process(
    classpath: str,
    bootstrap: str,
    *,
    topic: str,
    group: str,
    url: str,
    workdir: Path,
    tuning: Tuning,
) -> PeerProcess:
    """The peer as a ``PeerProcess`` (enter it to start); it runs until stopped."""
    argv = command(classpath, bootstrap, topic=topic, group=group, url=url, tuning=tuning)
    return PeerProcess(argv, "share-group", workdir)
