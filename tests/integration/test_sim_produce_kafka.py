"""``sim produce`` against the real embedded broker: creates the topic, keys and headers land."""

from __future__ import annotations

import time
from collections.abc import Callable

from click.testing import CliRunner
from confluent_kafka import Consumer

from siding.cli.sim import sim
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until


def test_produce_100_messages(bootstrap: str, topic_name: Callable[[str], str]) -> None:
    # Given a topic that does not exist yet; when 100 keyed messages are produced
    topic = topic_name("load")
    assert produce(bootstrap, topic, 100, keys=4, partitions=3) == 100

    # Then all 100 can be read back with their keys and headers
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    seen: dict[int, tuple[bytes | None, dict[str, bytes]]] = {}

    def read_some() -> bool:
        for message in consumer.consume(100, timeout=0.5):
            assert message.error() is None
            pairs = message.headers() or []
            assert isinstance(pairs, list)  # a consumed message's headers come as a list
            headers = {k: v for k, v in pairs if isinstance(v, bytes)}
            seen[int(headers["sim-seq"])] = (message.key(), headers)
        return len(seen) == 100

    try:
        wait_until(read_some, timeout_s=60, interval_s=0, what="100 messages")
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    finally:
        consumer.close()
    assert len(partitions) == 3
    assert sorted(seen) == list(range(100))
    assert seen[5][0] == b"k1"
    assert float(seen[5][1]["sim-produced-at"]) > 1_600_000_000


def test_the_cli_produces_too(bootstrap: str, topic_name: Callable[[str], str]) -> None:
    topic = topic_name("cli")
    args = ["produce", "--bootstrap", bootstrap, "--topic", topic, "--count", "10", "--rate", "500"]
    result = CliRunner().invoke(sim, args)
    assert result.exit_code == 0, result.output
    assert f"produced 10 messages to {topic}" in result.output


def test_the_rate_asked_for_is_the_rate_produced(
    bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    # Given 50 messages at 100 msg/s (each one's delivery report comes back long before the
    # next is due)
    topic = topic_name("rate")
    started = time.monotonic()
    produce(bootstrap, topic, 50, rate=100.0)
    took = time.monotonic() - started
    # Then producing them took the 0.49 s the rate says, not less (it once took about two
    # thirds of that: a served delivery report ended the wait for the next message)
    assert took >= 0.49
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    stamps: dict[int, float] = {}

    def read_some() -> bool:
        for message in consumer.consume(100, timeout=0.5):
            pairs = message.headers() or []
            assert isinstance(pairs, list)
            headers = {k: v for k, v in pairs if isinstance(v, bytes)}
            stamps[int(headers["sim-seq"])] = float(headers["sim-produced-at"])
        return len(stamps) == 50

    try:
        wait_until(read_some, timeout_s=60, interval_s=0, what="50 messages")
    finally:
        consumer.close()
    # ...and each message was produced no earlier than its time
    assert all(stamps[i] - stamps[0] >= i / 100.0 - 0.002 for i in range(50))
