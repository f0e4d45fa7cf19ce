"""A secured cluster for real (issue 11): the embedded broker's SASL_SSL listener, with a CA made
for the run. One siding config drives both Kafka clients: `siding run` reads through Spark's Java
client and delivers, dispatches, dead-letters and commits through librdkafka; `siding dlq list`
reads the DLQ with Spark; SCRAM-SHA-512 for the whole path, PLAIN for both clients once. The
password never shows: not in the run's output, /status, /metrics, check-config or errors."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from siding.cli.main import main
from siding.cli.run import check_config
from siding.config import SidingConfig, parse_config
from siding.devkit.broker import EmbeddedKafka, SaslUser, SecuredListener, free_port
from siding.devkit.harness import PipelineRun, toml_value
from siding.devkit.sim_consumer import Behaviour, Fate, plan, read_records
from siding.devkit.sim_produce import produce
from siding.errors import SidingError
from siding.kafka.reader import read_records as read_kafka
from siding.model import delivery_id
from tests.conftest import unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SimFactory = Callable[..., Any]
_ENTRY = "from siding.cli.main import main; main()"
SCRAM = SaslUser("siding-scram", f"scram-{secrets.token_hex(12)}")
PLAIN = SaslUser("siding-plain", f"plain-{secrets.token_hex(12)}")
PASSWORDS = (SCRAM.password, PLAIN.password)


@pytest.fixture(scope="module")
def secured() -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka(secured=SecuredListener(scram_users=(SCRAM,), plain_users=(PLAIN,)))
    try:
        broker.start()
    except (SidingError, OSError) as exc:
        unavailable("a SASL_SSL Kafka broker", exc)
    try:
        yield broker
    finally:
        broker.stop()


def kafka_table(broker: EmbeddedKafka, user: SaslUser, mechanism: str) -> str:
    """The [kafka] table of a secured cluster: librdkafka's names, the password from the env."""
    return (
        "[kafka]\n"
        f"bootstrap = {toml_value(broker.secure_bootstrap)}\n"
        '"security.protocol" = "SASL_SSL"\n'
        f"sasl.mechanism = {toml_value(mechanism)}\n"
        f"sasl.username = {toml_value(user.name)}\n"
        'sasl.password = "${KAFKA_PASSWORD}"\n'
        f'"ssl.ca.location" = {toml_value(str(broker.ca_file))}\n'
    )


def producer_settings(config: SidingConfig) -> dict[str, str | int]:
    """siding's own librdkafka settings for a producer of the test's records."""
    conf = config.kafka.client_config()
    return {k: str(v) for k, v in conf.items() if k != "bootstrap.servers"}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def test_run_dlq_and_commits_on_a_sasl_ssl_cluster_with_scram(
    secured: EmbeddedKafka,
    spark: SparkSession,  # noqa: ARG001 (`siding dlq list` reuses the running session)
    tmp_path: Path,
    topic_name: Callable[[str], str],
    sim_consumer: SimFactory,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # Given a siding.toml for the SASL_SSL listener only (SCRAM-SHA-512), password in the env
    count, topic = 40, topic_name("scram")
    behaviour = Behaviour(dead_ratio=0.2, seed=11)
    sim, received_file = sim_consumer(dead_ratio=behaviour.dead_ratio, seed=behaviour.seed)
    control = free_port()
    name = f"secured-{topic[-8:]}"
    text = kafka_table(secured, SCRAM, "SCRAM-SHA-512") + (
        f'[spark]\nmaster = "local[2]"\ncheckpoint_dir = {toml_value(str(tmp_path / "ckpt"))}\n'
        f'trigger = "200ms"\n[control]\nlisten = "127.0.0.1:{control}"\n'
        f"[[route]]\nname = {toml_value(name)}\ntopic = {toml_value(topic)}\n"
        f'group = "secured-group"\nendpoint = "grpc://{sim.target}"\ndeadline = "5s"\n'
    )
    toml = tmp_path / "siding.toml"
    toml.write_text(text)
    env = {"KAFKA_PASSWORD": SCRAM.password}
    config = parse_config(text, env=env)
    monkeypatch.setenv("KAFKA_PASSWORD", SCRAM.password)

    # check-config: valid, nothing a client would not get, the password masked everywhere
    checked = CliRunner().invoke(check_config, ["-c", str(toml), "--strict"])
    assert checked.exit_code == 0, checked.output
    assert checked.stderr.strip() == "ok: 1 route(s)"
    assert checked.output.count(SCRAM.password) == 0

    # And records produced through the SASL_SSL listener with siding's own librdkafka settings
    produce(secured.secure_bootstrap, topic, count, config=producer_settings(config))

    # When `siding run` runs the route (debug logging: the chattiest it gets)
    log = tmp_path / "siding-run.log"
    watcher = PipelineRun(config)  # reads the group's offsets and the DLQ; never started
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, "run", "-c", str(toml), "--log-level", "debug"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **env},
        )
    try:
        watcher.wait_committed({0: count}, timeout_s=180)
        pages = {
            path: _get(f"http://127.0.0.1:{control}{path}") for path in ("/status", "/metrics")
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    output = log.read_text(errors="replace")
    assert proc.returncode == 0, output[-3000:]

    # Then every record was delivered, the dead ones are in the DLQ, the group committed
    expected = {delivery_id(topic, 0, offset) for offset in range(count)}
    dead = {i for i in expected if plan(behaviour, i, 1).fate is Fate.DEAD}
    assert 0 < len(dead) < count
    assert {r.delivery_id for r in read_records(received_file)} == expected
    letters = watcher.dead_letters()
    assert {letter.story.origin.delivery_id for letter in letters if letter.story} == dead
    assert watcher.committed() == {0: count}
    assert json.loads(pages["/status"])["routes"][0]["name"] == name

    # And `siding dlq list` reads the DLQ through Spark's Java client, from the same file
    monkeypatch.setattr(sys, "argv", ["siding", "dlq", "list", "-c", str(toml), "--route", name,
                                      "--format", "json"])  # fmt: skip
    main()
    listed = capfd.readouterr()
    rows = [json.loads(line) for line in listed.out.splitlines() if line.startswith("{")]
    assert {row["id"] for row in rows} == dead

    # And the password showed nowhere: run output (Spark's JVM log too), pages, the DLQ tool
    assert "stopped cleanly" in output
    places = {"siding run": output, **pages, "dlq list": listed.out + listed.err}
    for place, shown in places.items():
        assert shown.count(SCRAM.password) == 0, f"the password shows in {place}"  # not echoed


def test_plain_works_for_both_clients_and_a_wrong_password_shows_no_secret(
    secured: EmbeddedKafka,
    spark: SparkSession,
    topic_name: Callable[[str], str],
) -> None:
    # Given the same [kafka] table with PLAIN
    topic = topic_name("plain")
    route = f'[[route]]\ntopic = "{topic}"\ngroup = "g"\nendpoint = "grpc://127.0.0.1:9"\n'
    text = kafka_table(secured, PLAIN, "PLAIN") + route
    config = parse_config(text, env={"KAFKA_PASSWORD": PLAIN.password})
    # When siding's librdkafka settings produce and read, and its Java settings read with Spark
    produce(secured.secure_bootstrap, topic, 5, config=producer_settings(config))
    by_librdkafka = read_kafka(config.kafka.client_config(), topic)
    by_java = (
        spark.read.format("kafka")
        .options(**config.kafka.spark_options())
        .option("subscribe", topic)
        .load()
        .count()
    )
    # Then both see the five records
    assert (len(by_librdkafka), by_java) == (5, 5)

    # And with a wrong password both clients fail, and neither error shows it
    wrong = f"wrong-{secrets.token_hex(8)}"
    bad = parse_config(text, env={"KAFKA_PASSWORD": wrong})
    with pytest.raises(Exception) as by_spark:  # noqa: PT011 (whatever Spark raises)
        spark.read.format("kafka").options(**bad.kafka.spark_options()).option(
            "subscribe", topic
        ).load().count()
    said: list[KafkaError] = []
    conf: dict[str, Any] = {**bad.kafka.client_config(), "error_cb": said.append, "log_level": 0}
    admin = AdminClient(conf)
    with pytest.raises(KafkaException) as by_rdkafka:
        admin.list_topics(timeout=5)
    admin.poll(1)  # serves the error callback
    errors = [str(by_spark.value), str(by_rdkafka.value), *map(str, said)]
    assert "Authentication failed" in errors[0]
    assert any("Authentication failed" in error for error in errors[2:]), errors
    for error in errors:
        assert error.count(wrong) + error.count(PLAIN.password) == 0
