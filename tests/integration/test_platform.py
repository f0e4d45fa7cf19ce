"""The parts work together: real Kafka (KRaft) and real Spark with Spark's own Kafka connector."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.wait import wait_until
from siding.jvm import pyspark_jars_dir, spark_jars
from siding.kafka.admin import TopicSpec, ensure_topics
from siding.pipeline.driver import session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COUNT = 1000


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    """Create ``topic`` and write ``count`` keyed messages with headers to it."""
    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [TopicSpec(topic, partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(
            topic,
            key=f"key-{i % 7}".encode(),
            value=f"value-{i}".encode(),
            headers=[("seq", str(i).encode()), ("bin", bytes([i % 256, 0xFF]))],
        )
    assert producer.flush(30) == 0


def _kafka_reader(spark: SparkSession, bootstrap: str, topic: str) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )


def _batch_reader(spark: SparkSession, bootstrap: str, topic: str) -> Any:
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )


def test_broker_accepts_clients_and_has_share_groups(kafka: EmbeddedKafka) -> None:
    # Given the embedded broker; when a client asks for metadata; then it answers as one node.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.brokers) == 1
    assert kafka.bootstrap.startswith("127.0.0.1:")
    # Share groups (KIP-932) are a finalized feature from format time on.
    formatted = (kafka.log_file.parent / "format.log").read_text()
    assert "name='share.version', featureLevel=1" in formatted


def test_streaming_query_reads_every_key_value_and_header(
    kafka: EmbeddedKafka, spark: SparkSession, topic_name: Callable[[str], str]
) -> None:
    # Given 1,000 keyed messages with headers
    topic = topic_name("src")
    _produce(kafka.bootstrap, topic, COUNT, partitions=2)
    rows: list[tuple[bytes, bytes, dict[str, bytes]]] = []
    lock = threading.Lock()

    def collect(batch: DataFrame, _batch_id: int) -> None:
        for row in batch.collect():
            headers = {h["key"]: bytes(h["value"]) for h in row["headers"]}
            with lock:
                rows.append((bytes(row["key"]), bytes(row["value"]), headers))

    # When a Structured Streaming query reads the topic with includeHeaders
    query = (
        _kafka_reader(spark, kafka.bootstrap, topic)
        .load()
        .writeStream.foreachBatch(collect)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    # Then every key, value and header arrived, exactly once
    assert len(rows) == COUNT
    by_value = {value: (key, headers) for key, value, headers in rows}
    for i in range(COUNT):
        key, headers = by_value[f"value-{i}".encode()]
        assert key == f"key-{i % 7}".encode()
        assert headers == {"seq": str(i).encode(), "bin": bytes([i % 256, 0xFF])}


def test_bounded_batch_read_counts_exact_range(
    kafka: EmbeddedKafka, spark: SparkSession, topic_name: Callable[[str], str]
) -> None:
    topic = topic_name("bounded")
    _produce(kafka.bootstrap, topic, COUNT)
    # When reading offsets [100, 600) as a batch
    frame = (
        _batch_reader(spark, kafka.bootstrap, topic)
        .option("startingOffsets", json.dumps({topic: {"0": 100}}))
        .option("endingOffsets", json.dumps({topic: {"0": 600}}))
        .load()
    )
    offsets = sorted(row["offset"] for row in frame.select("offset").collect())
    # Then exactly that range comes back
    assert offsets == list(range(100, 600))


def test_min_partitions_splits_one_kafka_partition_into_many_tasks(
    kafka: EmbeddedKafka, spark: SparkSession, topic_name: Callable[[str], str]
) -> None:
    topic = topic_name("split")
    _produce(kafka.bootstrap, topic, COUNT)
    frame = _batch_reader(spark, kafka.bootstrap, topic).option("minPartitions", "4").load()
    # One Kafka partition becomes 4 Spark tasks, each with a slice of the offsets
    sizes = frame.rdd.glom().map(len).collect()
    assert len(sizes) == 4
    assert sum(sizes) == COUNT
    assert all(size > 0 for size in sizes)


def test_wait_until_reports_what_it_waited_for() -> None:
    values = iter([0, 0, 3])
    assert wait_until(lambda: next(values), timeout_s=5, interval_s=0.01) == 3


def _logger_names(properties: Path) -> dict[str, str]:
    """``logger.<id>.name = <name>`` lines of a log4j2 properties file, by id."""
    names: dict[str, str] = {}
    for line in properties.read_text().splitlines():
        key, sep, value = line.partition("=")
        parts = key.strip().split(".")
        if sep and len(parts) == 3 and parts[0] == "logger" and parts[2] == "name":
            names[parts[1]] = value.strip()
    return names


def _class_or_package(name: str, entries: set[str], packages: set[str]) -> bool:
    path = name.replace(".", "/")
    return f"{path}.class" in entries or any(
        p == path or p.startswith(path + "/") for p in packages
    )


def test_every_quieted_logger_names_a_class_or_package_spark_runs_with() -> None:
    # Given the jars Spark runs with: pyspark's own and the connector's (spark.jars)
    jars = [*pyspark_jars_dir().glob("*.jar"), *map(Path, spark_jars())]
    entries: set[str] = set()
    for jar in jars:
        with zipfile.ZipFile(jar) as archive:
            entries.update(archive.namelist())
    packages = {entry.rpartition("/")[0] for entry in entries if entry.endswith(".class")}
    # When siding's log4j2 configuration names a logger
    names = _logger_names(Path(session.__file__).with_name("log4j2.properties"))
    assert len(names) >= 10
    # Then a class or a package of that name exists (Spark moves classes between releases:
    # a stale name quiets nothing and fails silently)
    missing = {
        logger: name
        for logger, name in names.items()
        if not _class_or_package(name, entries, packages)
    }
    assert not missing
