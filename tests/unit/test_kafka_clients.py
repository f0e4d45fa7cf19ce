"""One [kafka] table, two clients: what librdkafka and Spark's Java client each get, and what
check-config says about the rest (siding.config.kafka_clients)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaException, Producer
from pydantic import SecretStr

from siding.cli.run import check_config
from siding.config import looks_secret, parse_config
from siding.config.fields import Problem, Setting
from siding.config.kafka_clients import Note, split_settings, written_key
from siding.devkit.certs import make_tls_files
from siding.errors import ConfigError

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc"'
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="svc"'
SASL: dict[str, Setting] = {
    "security.protocol": "SASL_SSL",
    "sasl.username": "svc",
    "sasl.password": SecretStr("pw"),
}
ROUTE = '[[route]]\ntopic = "t"\ngroup = "g"\nendpoint = "grpc://127.0.0.1:50051"\n'


def _revealed(settings: Mapping[str, Setting]) -> dict[str, object]:
    return {k: v.get_secret_value() if isinstance(v, SecretStr) else v for k, v in settings.items()}


@pytest.mark.parametrize(
    ("shared", "librdkafka", "java"),
    [
        (  # SCRAM over TLS with a CA file: the cluster
            {**SASL, "sasl.mechanism": "SCRAM-SHA-512", "ssl.ca.location": "/ca.pem"},
            {**SASL, "sasl.mechanism": "SCRAM-SHA-512", "ssl.ca.location": "/ca.pem"},
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": f'{SCRAM_JAAS} password="pw";',
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/ca.pem",
            },
        ),
        (  # PLAIN, librdkafka's own plural name, the CA inline
            {**SASL, "sasl.mechanisms": "plain", "ssl.ca.pem": "-----BEGIN CERT"},
            {**SASL, "sasl.mechanisms": "plain", "ssl.ca.pem": "-----BEGIN CERT"},
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "plain",
                "sasl.jaas.config": f'{PLAIN_JAAS} password="pw";',
                "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": "-----BEGIN CERT",
            },
        ),
        (  # the system's CAs, no host name check: each client says it its own way
            {"security.protocol": "SSL", "ssl.ca.location": "probe",
             "ssl.endpoint.identification.algorithm": "none"},
            {"security.protocol": "SSL", "ssl.ca.location": "probe",
             "ssl.endpoint.identification.algorithm": "none"},
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""},
        ),
        (  # Java's way of saying "no host name check" reaches librdkafka as "none"
            {"ssl.endpoint.identification.algorithm": ""},
            {"ssl.endpoint.identification.algorithm": "none"},
            {"ssl.endpoint.identification.algorithm": ""},
        ),
    ],
)  # fmt: skip
def test_sasl_and_tls_settings_are_translated_for_the_java_client(
    shared: dict[str, Setting], librdkafka: dict[str, Setting], java: dict[str, object]
) -> None:
    settings = split_settings(shared)
    assert _revealed(settings.librdkafka) == _revealed(librdkafka)
    assert _revealed(settings.java) == java
    assert settings.notes == ()
    # the Java client's JAAS setting is a secret like the password it holds
    assert all(isinstance(v, SecretStr) for k, v in settings.java.items() if "jaas" in k)


def test_quotes_and_backslashes_in_credentials_are_escaped_for_jaas() -> None:
    shared = {**SASL, "sasl.mechanism": "PLAIN", "sasl.password": SecretStr('a"b\\c')}
    jaas = split_settings(shared).java["sasl.jaas.config"]
    assert isinstance(jaas, SecretStr)
    assert jaas.get_secret_value() == f'{PLAIN_JAAS} password="a\\"b\\\\c";'


def test_settings_reach_only_the_clients_that_know_them_and_the_rest_is_reported() -> None:
    shared: dict[str, Setting] = {
        "client.id": "siding",  # both
        "statistics.interval.ms": 0,  # librdkafka only
        "metadata.max.idle.ms": 300000,  # Java only
        "no.such.setting": 1,  # neither
        "ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256",  # both, in two syntaxes
    }
    settings = split_settings(shared)
    assert set(settings.librdkafka) == {
        "client.id", "statistics.interval.ms", "no.such.setting", "ssl.cipher.suites",
    }  # fmt: skip
    assert set(settings.java) == {
        "client.id", "metadata.max.idle.ms", "no.such.setting", "ssl.cipher.suites",
    }  # fmt: skip
    said = {note.key: note.message for note in settings.notes}
    assert set(said) == {
        'kafka."statistics.interval.ms"',
        'kafka."metadata.max.idle.ms"',
        'kafka."no.such.setting"',
        'kafka."ssl.cipher.suites"',
    }
    assert said['kafka."statistics.interval.ms"'].startswith("only librdkafka")
    assert (
        "Spark's Java client (source, sink) does not get it"
        in (said['kafka."statistics.interval.ms"'])
    )
    assert said['kafka."metadata.max.idle.ms"'].startswith("only Spark's Java client")
    assert "[kafka.java]" in said['kafka."metadata.max.idle.ms"']
    assert said['kafka."no.such.setting"'].startswith("neither client knows")
    assert "read its value differently" in said['kafka."ssl.cipher.suites"']


def test_per_client_tables_go_to_their_client_last_and_unknown_names_are_reported() -> None:
    oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    settings = split_settings(
        {**SASL, "sasl.mechanism": "OAUTHBEARER"},
        librdkafka={"socket.keepalive.enable": True, "sasl.jaas.config": "x"},
        java={"sasl.jaas.config": SecretStr(oauth), "receive.buffer.bytes": 1, "linger": 5},
    )
    # [kafka.java] gives its own JAAS: siding builds none (OAUTHBEARER is not one it can)
    assert _revealed(settings.java)["sasl.jaas.config"] == oauth
    assert settings.java["receive.buffer.bytes"] == 1
    assert "receive.buffer.bytes" not in settings.librdkafka
    assert settings.librdkafka["socket.keepalive.enable"] is True
    assert "socket.keepalive.enable" not in settings.java
    assert [str(n) for n in settings.notes] == [
        'kafka.librdkafka."sasl.jaas.config": librdkafka (dispatch, DLQ tools, group commits)'
        " does not know this setting and refuses to start with it",
        'kafka.java."linger": Spark\'s Java client (source, sink) does not know this setting'
        " and ignores it",
    ]


def test_sasl_settings_without_a_sasl_protocol_are_reported() -> None:
    notes = split_settings({**SASL, "sasl.mechanism": "PLAIN", "security.protocol": "SSL"}).notes
    assert notes == (
        Note(
            'kafka."sasl.mechanism"',
            "security.protocol is SSL: both clients ignore SASL settings unless it is SASL_SSL"
            " or SASL_PLAINTEXT",
        ),
    )


@pytest.mark.parametrize(
    ("shared", "key", "message"),
    [
        ({"sasl.username": "svc", "sasl.mechanism": "PLAIN"}, "sasl.password", "give both"),
        ({"sasl.password": SecretStr("pw"), "sasl.mechanism": "PLAIN"}, "sasl.username",
         "give both"),
        ({**SASL}, "sasl.username", "sasl.mechanism is not set"),
        ({**SASL, "sasl.mechanism": "GSSAPI"}, "sasl.username", "sasl.jaas.config in [kafka.java]"),
        ({**SASL, "sasl.mechanism": "PLAIN", "sasl.jaas.config": SecretStr("x")},
         "sasl.jaas.config", "give either sasl.username and sasl.password or sasl.jaas.config"),
        ({"sasl.mechanism": "PLAIN", "sasl.mechanisms": "PLAIN"}, "sasl.mechanisms", "not both"),
        ({"ssl.ca.location": "/a", "ssl.ca.pem": "b"}, "ssl.ca.pem", "not both"),
        ({"ssl.ca.location": "/a", "ssl.truststore.location": "/b"}, "ssl.truststore.location",
         "not both"),
        ({**SASL, "sasl.mechanism": "PLAIN", "sasl.password": SecretStr("pw\nsecret")},
         "sasl.password", "control character"),
    ],
)  # fmt: skip
def test_settings_that_cannot_work_are_errors_naming_the_key(
    shared: dict[str, Setting], key: str, message: str
) -> None:
    with pytest.raises(Problem) as caught:
        split_settings(shared)
    assert caught.value.loc == (key,)
    assert message in caught.value.message
    assert "pw" not in caught.value.message and "secret" not in caught.value.message


def test_errors_from_a_file_name_the_key_and_never_the_secret() -> None:
    cases = {
        '[kafka]\nbootstrap = "b:1"\nsasl.username = "svc"\nsasl.password = "hunter2"\n': (
            'kafka."sasl.username": sasl.mechanism is not set'
        ),
        '[kafka]\nbootstrap = "b:1"\n[kafka.java]\n"group.id" = "hunter2"\n': (
            'kafka.java."group.id": consumer groups are set per route'
        ),
        '[kafka]\nbootstrap = "b:1"\n"auto.offset.reset" = "earliest"\n': (
            'kafka."auto.offset.reset": Spark refuses it'
        ),
        '[kafka]\nbootstrap = "b:1"\njava = "hunter2"\n': "kafka.java: write [kafka.java] as a",
    }
    for text, expected in cases.items():
        with pytest.raises(ConfigError) as caught:
            parse_config(text + ROUTE, env={})
        assert str(caught.value).startswith(expected), str(caught.value)
        assert "hunter2" not in str(caught.value)


def test_the_written_key_quotes_dotted_names() -> None:
    assert written_key("sasl.username") == 'kafka."sasl.username"'
    assert written_key("java", "sasl.jaas.config") == 'kafka.java."sasl.jaas.config"'


def test_librdkafka_accepts_every_setting_siding_gives_it(tmp_path: Path) -> None:
    # Given a real CA file and every translated librdkafka setting
    ca = make_tls_files(tmp_path).ca
    text = (
        '[kafka]\nbootstrap = "127.0.0.1:9"\n"security.protocol" = "SASL_SSL"\n'
        'sasl.mechanism = "SCRAM-SHA-512"\nsasl.username = "svc"\nsasl.password = "pw"\n'
        f'"ssl.ca.location" = "{ca}"\n"ssl.endpoint.identification.algorithm" = ""\n'
        '"metadata.max.idle.ms" = 1000\n'  # Java only: must not reach librdkafka
        f'[kafka.librdkafka]\n"socket.keepalive.enable" = true\n{ROUTE}'
    )
    config = parse_config(text, env={})
    # When the real librdkafka builds a client from them, it refuses none (it would refuse a
    # Java name: that is why Java-only names stay away from it)
    Producer(config.kafka.client_config()).flush(0)
    with pytest.raises(KafkaException, match="No such configuration property"):
        Producer({"metadata.max.idle.ms": 1000})


def test_check_config_warns_about_each_setting_and_never_shows_a_secret(tmp_path: Path) -> None:
    # Given a secured cluster's settings, one of them librdkafka-only
    path = tmp_path / "siding.toml"
    path.write_text(
        '[kafka]\nbootstrap = "127.0.0.1:9093"\n"security.protocol" = "SASL_SSL"\n'
        'sasl.mechanism = "SCRAM-SHA-512"\nsasl.username = "svc"\n'
        'sasl.password = "${KAFKA_PASSWORD}"\n"ssl.ca.location" = "/etc/ca.pem"\n'
        f'"statistics.interval.ms" = 0\n{ROUTE}'
    )
    runner = CliRunner(env={"KAFKA_PASSWORD": "s3cr3t-Pa55"})
    # When it is checked
    done = runner.invoke(check_config, ["-c", str(path)])
    # Then it is valid, says what each client gets, and warns about the one setting
    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)
    assert shown["kafka_clients"]["java"]["sasl.jaas.config"] == "**********"
    assert shown["kafka_clients"]["java"]["ssl.truststore.location"] == "/etc/ca.pem"
    assert shown["kafka_clients"]["librdkafka"]["sasl.password"] == "**********"
    assert "statistics.interval.ms" not in shown["kafka_clients"]["java"]
    assert done.stderr.splitlines() == [
        'warning: kafka."statistics.interval.ms": only librdkafka (dispatch, DLQ tools, group'
        " commits) knows this setting; Spark's Java client (source, sink) does not get it (move"
        " it to [kafka.librdkafka] to say so)",
        "ok: 1 route(s), 1 warning(s)",
    ]
    assert "s3cr3t-Pa55" not in done.output
    # and --strict turns the warning into a failure
    assert runner.invoke(check_config, ["-c", str(path), "--strict"]).exit_code == 1


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("sasl.password", True),
        ("sasl.jaas.config", True),
        ("ssl.key.password", True),
        ("ssl.keystore.key", True),  # the Java client's inline PEM private key
        ("ssl.key.pem", True),
        ("sasl.oauthbearer.client.secret", True),
        ("sasl.username", False),
        ("ssl.ca.location", False),
        ("ssl.keystore.location", False),
    ],
)
def test_names_that_hold_credentials_are_secret(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret
