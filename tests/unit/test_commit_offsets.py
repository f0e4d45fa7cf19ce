"""A group commit that Kafka refuses partition by partition is an error, retried while it may
pass (it used to be taken for done: the group silently stayed behind)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError

from siding.kafka.admin import KafkaAdminError, commit_offsets


@dataclass
class _Partition:
    partition: int
    error: KafkaError | None


@dataclass
class _Answer:
    topic_partitions: list[_Partition]


class _Admin:
    """Answers each commit with the next list of per-partition errors (in memory)."""

    def __init__(self, *answers: list[KafkaError | None]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def alter_consumer_group_offsets(self, _req: list[Any], **_: Any) -> dict[str, Future[Any]]:
        self.calls += 1
        errors = self.answers.pop(0)
        future: Future[Any] = Future()
        future.set_result(_Answer([_Partition(p, e) for p, e in enumerate(errors)]))
        return {"group": future}


def test_a_partition_refused_for_good_is_an_error() -> None:
    admin = _Admin([None, KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaAdminError, match=r"t-1"):
        commit_offsets(admin, "g", "t", {0: 5, 1: 7})  # type: ignore[arg-type]
    assert admin.calls == 1


def test_a_partition_refused_while_the_coordinator_loads_is_committed_again() -> None:
    admin = _Admin([KafkaError(KafkaError.NOT_COORDINATOR)], [None])
    commit_offsets(admin, "g", "t", {0: 5})  # type: ignore[arg-type]
    assert admin.calls == 2
