"""Topic creation and consumer-group offsets through confluent-kafka's AdminClient."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from siding.errors import SidingError


class KafkaAdminError(SidingError):
    retriable = True


T = TypeVar("T")


_TRANSIENT = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


def _is_retriable(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    return error.retriable() or error.code() in _TRANSIENT


def with_retries(call: Callable[[], T], timeout_s: float = 30.0) -> T:
    """Run an admin call again while Kafka answers with a retriable error (coordinator loading,
    leader moving), up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while True:
        try:
            return call()
        except (KafkaAdminError, KafkaException) as exc:
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            retriable = isinstance(cause, KafkaException) and _is_retriable(cause)
            if not retriable or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(2.0, delay * 2)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    config: Mapping[str, str] = field(default_factory=dict)


def admin_client(client_conf: Mapping[str, str]) -> AdminClient:
    return AdminClient(dict(client_conf))


def existing_topics(admin: AdminClient, timeout_s: float = 10.0) -> dict[str, int]:
    """Topic name -> partition count."""
    metadata = admin.list_topics(timeout=timeout_s)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def cluster_id(admin: AdminClient, timeout_s: float = 10.0) -> str:
    """The Kafka cluster's id ("" when the broker does not say)."""
    return str(admin.list_topics(timeout=timeout_s).cluster_id or "")


def topic_config(admin: AdminClient, topic: str, key: str, timeout_s: float = 10.0) -> str | None:
    """One config value of ``topic`` as the broker reports it (``None`` when it has none)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, unstubbed
        ConfigResource,
        ResourceType,
    )

    def fetch() -> str | None:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result()
        entry = entries.get(key)
        return None if entry is None or entry.value is None else str(entry.value)

    return with_retries(fetch)


def ensure_topics(admin: AdminClient, specs: Iterable[TopicSpec], timeout_s: float = 30.0) -> None:
    """Create the topics that are missing; an existing topic is left as it is."""
    present = existing_topics(admin)
    missing = [spec for spec in specs if spec.name not in present]
    if not missing:
        return
    futures = admin.create_topics(
        # replication_factor=-1: the broker's default.replication.factor, so lane, DLQ and state
        # records are as durable as the cluster is configured to make them.
        [NewTopic(s.name, s.partitions, -1, config=dict(s.config)) for s in missing],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
                continue
            raise KafkaAdminError(f"cannot create topic {name}: {exc}") from exc


def delete_topics(admin: AdminClient, names: Iterable[str], timeout_s: float = 30.0) -> None:
    futures = admin.delete_topics(list(names), operation_timeout=timeout_s)
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            raise KafkaAdminError(f"cannot delete topic {name}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Committed:
    """A group's committed offset of one partition (the next record to read) and the metadata
    string the committer stored with it ("" when none)."""

    offset: int
    metadata: str = ""


def committed_offsets(
    client_conf: Mapping[str, object], group: str, topic: str, timeout_s: float = 10.0
) -> dict[int, int]:
    """Partition -> the group's committed offset (the next record to read), for one topic."""
    found = committed_positions(client_conf, group, topic, timeout_s)
    return {p: c.offset for p, c in found.items()}


def committed_positions(
    client_conf: Mapping[str, object], group: str, topic: str, timeout_s: float = 10.0
) -> dict[int, Committed]:
    """Partition -> the group's committed offset and its metadata, for one topic.

    Read through a consumer that never joins the group: librdkafka's AdminClient
    ListConsumerGroupOffsets can crash the process when the coordinator moves
    (librdkafka issue 5040), the consumer's OffsetFetch path does not.
    """
    from confluent_kafka import Consumer

    consumer = Consumer({**client_conf, "group.id": group, "enable.auto.commit": False})
    try:

        def fetch() -> dict[int, Committed]:
            metadata = consumer.list_topics(topic, timeout=timeout_s)
            partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
            answer = consumer.committed(partitions, timeout=timeout_s)
            return {
                tp.partition: Committed(tp.offset, tp.metadata or "")
                for tp in answer
                if tp.offset >= 0
            }

        return with_retries(fetch)
    finally:
        consumer.close()


def commit_offsets(
    admin: AdminClient,
    group: str,
    topic: str,
    offsets: Mapping[int, int],
    timeout_s: float = 10.0,
    *,
    metadata: str = "",
) -> None:
    """Set the group's committed offsets (next record to read) for one topic, each with
    ``metadata`` (siding marks its own commits: docs/operations.md, "Moving a route's offsets")."""
    if offsets:
        with_retries(
            lambda: _commit_offsets(admin, group, topic, offsets, timeout_s, metadata=metadata)
        )


def _commit_offsets(
    admin: AdminClient,
    group: str,
    topic: str,
    offsets: Mapping[int, int],
    timeout_s: float,
    *,
    metadata: str,
) -> None:
    # confluent-kafka takes no None for metadata: a commit without any leaves it out.
    partitions = [
        TopicPartition(topic, p, o, metadata=metadata) if metadata else TopicPartition(topic, p, o)
        for p, o in sorted(offsets.items())
    ]
    futures = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, partitions)], request_timeout=timeout_s
    )
    for future in futures.values():
        try:
            answer = future.result()
        except KafkaException as exc:
            raise KafkaAdminError(f"cannot commit offsets of group {group}: {exc}") from exc
        # The call succeeds as a whole while partitions fail one by one (NOT_COORDINATOR
        # while the group coordinator loads): each is an error, retried when it may pass.
        for tp in answer.topic_partitions or ():
            if tp.error is not None:
                raise KafkaAdminError(
                    f"cannot commit offsets of group {group} on {topic}-{tp.partition}:"
                    f" {tp.error.str()}"
                ) from KafkaException(tp.error)
