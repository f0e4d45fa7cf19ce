"""Shared fixtures: the real Kafka broker and SparkSession (session-scoped), unique topic names.

Under ``CI=true`` a test that cannot start Kafka or Spark fails; elsewhere it is skipped with the
reason, so a laptop without Java can still run the unit tests.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from siding.devkit.broker import EmbeddedKafka
from siding.errors import SidingError
from tests.schedule import load_table, longest_first

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_TESTS = Path(__file__).parent

# Every JVM the tests start (Spark's, the brokers, each `siding run`'s, which inherit this) with C1
# only and the serial collector: a start and first batch of `siding run` took 41 CPU s instead of
# 76 on this project's machine; the suite is short runs of little traffic, never a benchmark
# (bench/ does not set it). A value set outside wins.
os.environ.setdefault("SIDING_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


# py4j (Spark's Python-JVM bridge) leaves sockets to the garbage collector.
_PY4J_SOCKETS = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The longest files first (tests/schedule.py): xdist keeps this order (--no-loadscope-reorder)
    order = longest_first((item.nodeid.split("::")[0] for item in items), load_table())
    rank = {path: n for n, path in enumerate(order)}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])
    for item in items:
        path = Path(str(item.fspath))
        if _TESTS / "integration" in path.parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(_PY4J_SOCKETS)
        elif _TESTS / "e2e" in path.parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(_PY4J_SOCKETS)


def unavailable(what: str, error: BaseException) -> None:
    """Fail under CI, skip elsewhere: a missing broker must never pass silently in CI."""
    message = f"cannot start {what}: {error}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka() -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka()
    try:
        broker.start()
    except (SidingError, OSError) as exc:
        unavailable("Kafka", exc)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap(kafka: EmbeddedKafka) -> str:
    return kafka.bootstrap


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    try:
        from siding.pipeline.driver.session import build_session

        session = build_session("local[2]", app_name="siding-tests")
    except Exception as exc:
        unavailable("Spark", exc)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique, legal topic names for this test: ``topic_name("src")``."""
    stem = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:60]
    token = uuid.uuid4().hex[:8]

    def make(label: str = "t") -> str:
        return f"test-{stem}-{label}-{token}"

    return make
