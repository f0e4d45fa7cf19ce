"""More than one Kafka cluster (docs/configuration.md "More than one cluster"): the tables, a
route's two clusters, and which cluster each client of a route's topics talks to."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from siding import naming
from siding.config import (
    DEFAULT_CLUSTER,
    RouteConfig,
    SidingConfig,
    cluster_name,
    parse_config,
    parse_route,
)
from siding.control.kafka_view import KafkaView, route_topics
from siding.errors import ConfigError
from siding.kafka.admin import TopicSpec
from siding.pipeline.driver import commits, pin_claims, topics
from siding.pipeline.driver.batch import BatchSink
from siding.pipeline.driver.clusters import Admins
from siding.pipeline.driver.commits import CommitTarget, make_listener
from siding.pipeline.driver.controls import RouteControls
from siding.pipeline.driver.drain import Drain
from siding.pipeline.driver.route import RouteRuntime

KAFKA = """
[kafka]
bootstrap = "one:9092"
"client.id" = "siding"
[kafka.clusters.two]
bootstrap = "two:9093"
"security.protocol" = "SASL_SSL"
sasl.mechanism = "PLAIN"
sasl.username = "u"
sasl.password = "p"
[kafka.clusters.three]
bootstrap = "three:9094"
"""
ROUTE = '[[route]]\ntopic = "orders"\ngroup = "g"\nendpoint = "grpc://c:1"\n'


def config(route: str = "", kafka: str = KAFKA) -> SidingConfig:
    return parse_config(kafka + ROUTE + route, env={})


@pytest.mark.parametrize(
    ("route", "source", "write"),
    [
        ("", "default", "default"),
        ('cluster = "two"', "two", "two"),
        ('write_cluster = "two"', "default", "two"),
        ('cluster = "two"\nwrite_cluster = "three"', "two", "three"),
        ('cluster = "two"\nwrite_cluster = "default"', "two", "default"),
        ('cluster = "default"', "default", "default"),
    ],
)
def test_a_route_reads_its_cluster_and_writes_to_its_write_cluster_or_where_it_reads(
    route: str, source: str, write: str
) -> None:
    # Given a route with (or without) cluster and write_cluster
    routed = config(route).route[0]
    # Then its roles name these clusters
    assert (cluster_name(routed, "source"), cluster_name(routed, "write")) == (source, write)


def test_cluster_for_gives_each_cluster_its_own_settings_for_both_clients() -> None:
    # Given a route reading the default cluster and writing to a SASL one
    loaded = config('write_cluster = "two"')
    route = loaded.route[0]
    # When each role's cluster is asked for
    source, write = (loaded.kafka.cluster_for(route, role) for role in ("source", "write"))
    # Then each has its own bootstrap and security, translated for Spark as [kafka] is
    assert source.client_config() == {"bootstrap.servers": "one:9092", "client.id": "siding"}
    assert write.client_config()["bootstrap.servers"] == "two:9093"
    assert write.client_config()["sasl.password"] == "p"
    assert "client.id" not in write.client_config()
    java = write.spark_options()
    assert java["kafka.bootstrap.servers"] == "two:9093"
    assert 'username="u" password="p"' in java["kafka.sasl.jaas.config"]
    assert loaded.kafka.cluster(DEFAULT_CLUSTER) is loaded.kafka
    with pytest.raises(ConfigError, match="no cluster named 'nine'"):
        loaded.kafka.cluster("nine")


@pytest.mark.parametrize(
    ("kafka", "route", "key", "message"),
    [
        (
            '[kafka.clusters.two]\nbootstrap = "t:1"\nsasl.username = "u"\n',
            "",
            'kafka.clusters.two."sasl.password"',
            "required with sasl.username",
        ),
        (
            '[kafka.clusters.two]\nbootstrap = "t:1"\n"group.id" = "x"\n',
            "",
            'kafka.clusters.two."group.id"',
            "consumer groups are set per route",
        ),
        (
            '[kafka.clusters.two]\nbootstrap = "t:1"\nsasl.username = "u"\nsasl.password = "p"\n',
            "",
            'kafka.clusters.two."sasl.username"',
            "give sasl.jaas.config in [kafka.clusters.two.java]",
        ),
        ("[kafka.clusters.two]\nx = 1\n", "", "kafka.clusters.two.bootstrap", "missing"),
        ('[kafka.clusters.two]\nbootstrap = ""\n', "", "kafka.clusters.two.bootstrap", "empty"),
        ('[kafka.clusters.default]\nbootstrap = "t:1"\n', "", "kafka.clusters.default", "[kafka]"),
        ('[kafka.clusters."a b"]\nbootstrap = "t:1"\n', "", 'kafka.clusters."a b"', "letters"),
        ("", 'cluster = "two"', "route[0].cluster", "no cluster named 'two'"),
        ("", 'write_cluster = "two"', "route[0].write_cluster", "define [kafka.clusters.two]"),
        (
            '[kafka.clusters.two]\nbootstrap = "t:1"\n',
            'write_cluster = "two"\nordering = "key"',
            "route[0].write_cluster",
            "ordering = 'key'",
        ),
    ],
)
def test_a_bad_cluster_is_an_error_naming_its_key(
    kafka: str, route: str, key: str, message: str
) -> None:
    text = '[kafka]\nbootstrap = "one:1"\n' + kafka + ROUTE + route
    with pytest.raises(ConfigError) as error:
        parse_config(text, env={})
    assert error.value.key == key
    assert message in str(error.value)


def test_key_mode_may_name_its_own_cluster_for_both() -> None:
    route = config('cluster = "two"\nwrite_cluster = "two"\nordering = "key"').route[0]
    assert cluster_name(route, "write") == "two"


def test_the_same_topic_and_group_on_two_clusters_are_two_routes() -> None:
    # Given a second route of the same topic and group, on another cluster
    other = '[[route]]\nname = "b"\ntopic = "orders"\ngroup = "g"\nendpoint = "grpc://c:1"\n'
    # Then it is accepted there, and refused on the same cluster
    assert len(config("", KAFKA).model_copy().route) == 1
    assert len(parse_config(KAFKA + ROUTE + other + 'cluster = "two"\n', env={}).route) == 2
    with pytest.raises(ConfigError, match="same topic and group"):
        parse_config(KAFKA + ROUTE + other, env={})


def test_each_clusters_secrets_come_from_its_own_environment_variables() -> None:
    # Given two clusters whose passwords are given as ${VAR}
    kafka = (
        '[kafka]\nbootstrap = "one:1"\nsasl.mechanism = "PLAIN"\nsasl.username = "a"\n'
        'sasl.password = "${ONE_PW}"\n[kafka.clusters.two]\nbootstrap = "two:2"\n'
        'sasl.mechanism = "PLAIN"\nsasl.username = "b"\nsasl.password = "${TWO_PW}"\n'
    )
    # When the file is read with both set
    loaded = parse_config(kafka + ROUTE, env={"ONE_PW": "s1", "TWO_PW": "s2"})
    # Then each cluster's clients get their own
    assert loaded.kafka.client_config()["sasl.password"] == "s1"
    assert loaded.kafka.cluster("two").client_config()["sasl.password"] == "s2"
    assert "s2" not in json.dumps(loaded.redacted_dict(), default=str)
    # And an unset one is an error naming the cluster's key
    with pytest.raises(ConfigError) as error:
        parse_config(kafka + ROUTE, env={"ONE_PW": "s1"})
    assert error.value.key == "kafka.clusters.two.sasl.password"
    assert "TWO_PW is not set" in str(error.value)


def test_check_config_shows_the_clusters_secrets_masked_and_notes_name_their_table() -> None:
    kafka = KAFKA + '[kafka.clusters.three.java]\n"no.such.setting" = 1\n'
    loaded = config(kafka=kafka)
    shown = loaded.redacted_dict()["kafka"]["clusters"]
    assert shown["two"]["bootstrap"] == "two:9093"
    assert shown["two"]["sasl.password"] == "**********"
    assert [n.key for n in loaded.kafka.notes] == ['kafka.clusters.three.java."no.such.setting"']


class FakeAdmin:
    def __init__(self, name: str, present: Mapping[str, int]) -> None:
        self.name = name
        self.present = dict(present)
        self.created: list[str] = []

    def __len__(self) -> int:  # as confluent_kafka's AdminClient: falsy with nothing queued
        return 0


def _prepare_on(
    monkeypatch: pytest.MonkeyPatch, route: RouteConfig, read: FakeAdmin, write: FakeAdmin | None
) -> topics.Prepared:
    monkeypatch.setattr(topics, "existing_topics", lambda admin: dict(admin.present))
    monkeypatch.setattr(topics, "topic_config", lambda _admin, _topic, _key: None)

    def ensure(admin: FakeAdmin, specs: list[TopicSpec]) -> None:
        admin.created += [s.name for s in specs]

    monkeypatch.setattr(topics, "ensure_topics", ensure)
    return topics.prepare(read, route, write_admin=write)


def test_a_route_start_checks_its_sources_on_one_cluster_and_creates_its_topics_on_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a route whose source is on cluster one and whose outputs are on cluster two
    route = config('write_cluster = "two"\noutputs = ["events"]').route[0]
    one, two = FakeAdmin("one", {"orders": 3}), FakeAdmin("two", {"events": 1})
    # When it is prepared
    prepared = _prepare_on(monkeypatch, route, one, two)
    # Then its lanes, DLQ and state topics are made on two (sized by the source on one)
    assert one.created == []
    assert naming.route_dlq(route) in two.created
    assert all(t.startswith(naming.route_prefix(route.name)) for t in two.created)
    assert (prepared.sources, prepared.partitions) == (("orders",), 3)
    # And it knows which topics are on each cluster (pin claims are read on the source's)
    assert prepared.on_source == {"orders": 3}
    assert prepared.on_write == {"events": 1}
    assert set(prepared.present) == {"orders", "events"}
    # And an output topic that exists only on the source's cluster is missing
    one.present["events"], two.present = 1, {}
    with pytest.raises(topics.RouteFailed, match="output topic"):
        _prepare_on(monkeypatch, route, one, two)


def test_a_pinned_route_claims_its_partitions_on_the_cluster_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a route pinned to partition 0 of a topic on cluster two, writing to cluster three
    loaded = config('cluster = "two"\nwrite_cluster = "three"\npartitions = [0]')
    seen: set[str] = set()

    class Producer:
        def __init__(self, conf: Mapping[str, object]) -> None:
            seen.add(f"write {conf['bootstrap.servers']}")

        def write(self, _records: object) -> None:
            return None

        def close(self) -> None:
            return None

    def read(conf: Mapping[str, object], _topic: str) -> list[tuple[bytes, bytes | None]]:
        seen.add(f"read {conf['bootstrap.servers']}")
        return []

    def ensure(admin: str, _specs: object) -> None:
        seen.add(f"create {admin}")

    monkeypatch.setattr(pin_claims, "admin_client", lambda conf: conf["bootstrap.servers"])
    monkeypatch.setattr(pin_claims, "ensure_topics", ensure)
    monkeypatch.setattr(pin_claims, "read_to_end", read)
    monkeypatch.setattr(pin_claims, "DurableProducer", Producer)
    runtime = RouteRuntime(
        loaded.route[0],
        loaded,
        Admins(loaded.kafka, make=lambda _conf: None),
        sink=BatchSink(),
        stop=threading.Event(),
        controls=RouteControls(),
        drain=Drain(),
    )
    # When it claims its pins and gives them back
    runtime.pin_claims.open({"orders": 1})
    runtime.pin_claims.close()
    # Then siding.pins is made, read and written on cluster two, where its group's offsets are
    assert seen == {"create two:9093", "read two:9093", "write two:9093"}


def test_admins_make_one_client_per_cluster_with_its_own_settings() -> None:
    loaded = config('cluster = "two"\nwrite_cluster = "three"')
    made: list[str] = []

    def make(conf: Mapping[str, str]) -> str:
        made.append(conf["bootstrap.servers"])
        return conf["bootstrap.servers"]

    admins = Admins(loaded.kafka, make=make)
    route = loaded.route[0]
    assert admins.for_route(route, "source") == "two:9093"
    assert admins.for_route(route, "write") == "three:9094"
    assert admins.of() == "one:9092"
    assert admins.of("two") == "two:9093"
    assert made == ["two:9093", "three:9094", "one:9092"]


def test_the_listener_commits_each_querys_offsets_on_its_targets_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a main lane on cluster one and a retry lane on cluster two
    done: list[tuple[str, str, str, dict[int, int]]] = []

    def commit(admin: str, group: str, topic: str, offsets: dict[int, int], **_: Any) -> None:
        done.append((admin, group, topic, offsets))

    monkeypatch.setattr(commits, "commit_offsets", commit)
    admins = Admins(config().kafka, make=lambda conf: conf["bootstrap.servers"])
    targets = {
        "main": CommitTarget("g", "orders"),
        "lane": CommitTarget("g", "siding.r.retry-1", cluster="two"),
    }
    listener = make_listener(admins, targets)

    class Source:
        def __init__(self, topic: str) -> None:
            self.endOffset = json.dumps({topic: {"0": 7}})

    class Progress:
        def __init__(self, name: str, topic: str) -> None:
            self.name, self.batchId, self.sources = name, 1, (Source(topic),)

    class Event:
        def __init__(self, name: str, topic: str) -> None:
            self.progress = Progress(name, topic)

    # When each query reports progress
    listener.onQueryProgress(Event("main", "orders"))
    listener.onQueryProgress(Event("lane", "siding.r.retry-1"))
    # Then each commit went to the cluster of its topic
    assert done == [
        ("one:9092", "g", "orders", {0: 7}),
        ("two:9093", "g", "siding.r.retry-1", {0: 7}),
    ]


def test_the_console_reads_lag_where_the_source_is_and_lanes_where_they_are() -> None:
    loaded = config('write_cluster = "two"')
    watched = route_topics(loaded.route[0])
    assert (watched.cluster, watched.write_cluster) == ("default", "two")
    view = KafkaView(
        loaded.kafka.client_config(),
        [watched],
        clusters={n: c.client_config() for n, c in loaded.kafka.clusters.items()},
    )
    assert view.conf_of(watched.cluster)["bootstrap.servers"] == "one:9092"
    assert view.conf_of(watched.write_cluster)["bootstrap.servers"] == "two:9093"


def test_a_route_made_through_the_api_may_name_the_configured_clusters_only() -> None:
    table = {"topic": "orders", "group": "g", "endpoint": "grpc://c:1", "write_cluster": "two"}
    route = parse_route(table, clusters=("default", "two"))
    assert cluster_name(route, "write") == "two"
    with pytest.raises(ConfigError) as error:
        parse_route(table, clusters=("default",))
    assert error.value.key.endswith("].write_cluster")
    assert "no cluster named 'two'" in str(error.value)
