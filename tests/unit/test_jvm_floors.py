"""Spark's jars carry no kafka-clients with known vulnerabilities (CVE-2025-27817/27818)."""

from __future__ import annotations

import re

import pytest

from siding import jvm


@pytest.mark.parametrize(
    ("jars", "refused"),
    [
        (["kafka-clients-3.9.0.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"], ["kafka-clients"]),
        (["kafka-clients-3.8.1.jar"], ["kafka-clients"]),
        (["kafka-clients-3.9.1.jar", "kafka-clients-3.9.2.jar", "kafka-clients-4.1.0.jar"], []),
        # Another artifact with "kafka-clients" inside its name is not kafka-clients.
        (["spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "lz4-java-1.8.0.jar"], []),
    ],
)
def test_jars_below_their_floor_are_named(jars: list[str], refused: list[str]) -> None:
    problems = jvm.below_floor(jars)
    assert [p.split("-3.")[0] for p in problems] == refused
    assert all("CVE-2025-27817" in p and "3.9.1" in p for p in problems)


def test_the_spark_pom_pins_kafka_clients_at_or_above_the_floor() -> None:
    pom = (jvm.project_root() / "jvm" / "spark" / "pom.xml").read_text()
    pinned = re.search(r"<kafka\.clients\.version>([^<]+)</", pom)
    assert pinned is not None
    assert "${kafka.clients.version}" in pom
    assert jvm.below_floor([f"kafka-clients-{pinned.group(1)}.jar"]) == []
