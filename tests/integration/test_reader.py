"""Reading a topic to its end (``siding.kafka.reader``) against the embedded broker."""

from __future__ import annotations

from collections.abc import Callable

from siding.devkit.sim_produce import produce
from siding.kafka.reader import read_records, watermarks_of


def test_a_topic_of_several_partitions_is_read_whole(
    bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    # A partition read to its last record then reports its end (PARTITION_EOF) while the
    # others are still being read: that end is no error (the soak's four-partition DLQ).
    topic = topic_name("reader")
    produce(bootstrap, topic, 200, partitions=4, keys=8)
    conf = {"bootstrap.servers": bootstrap}
    ends = watermarks_of(conf, topic)
    assert len(ends) == 4
    assert sum(1 for n in ends.values() if n) >= 2
    for _ in range(5):
        records = read_records(conf, topic)
        assert sorted((r.partition, r.offset) for r in records) == sorted(
            (p, o) for p, n in ends.items() for o in range(n)
        )
