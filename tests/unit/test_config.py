"""Loading a valid siding.toml: defaults, durations, interpolation, secrets, endpoints, paths."""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from siding.config import (
    format_duration,
    interpolate,
    load_config,
    parse_config,
    parse_duration,
)
from siding.errors import ConfigError
from siding.model import Lane, Ordering
from siding.transport.factory import batch_limits, make_transport

BASE = """
[kafka]
bootstrap = "127.0.0.1:9092"

[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://127.0.0.1:50051"
"""
PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def test_a_minimal_route_gets_the_documented_defaults() -> None:
    config = parse_config(BASE, env={})
    route = config.route_named("billing")
    assert route.ordering is Ordering.UNORDERED
    assert (route.transport, route.max_in_flight, route.deadline) == ("stream", 1000, 30.0)
    assert (route.rate_limit, route.starting_offsets, route.min_partitions) == (0, "earliest", 0)
    assert (route.max_offsets_per_trigger, route.lanes, route.dlq) == (10000, (), None)
    assert (route.max_retry_after, route.dlq_flood_ratio, route.dlq_flood_min_batch) == (
        600.0,
        0.5,
        20,
    )
    assert (route.breaker.failure_threshold, route.breaker.open_for) == (5, 5.0)
    assert (route.adaptive.enabled, route.adaptive.min_in_flight) == (True, 1)
    assert (route.adaptive.latency, route.adaptive.latency_tolerance) == (False, 2.0)
    assert route.progress_interval == 0.25
    assert parse_config(f'{BASE}progress_interval = "0s"\n', env={}).route[0].progress_interval == 0
    assert (config.spark.master, config.spark.trigger) == ("local[*]", 0.0)
    assert config.control.address() == ("127.0.0.1", 9464)


def test_a_route_without_a_name_is_named_topic_dot_group() -> None:
    config = parse_config(BASE.replace('name = "billing"\n', ""), env={})
    assert config.routes[0].name == "trips.billing"


def test_lanes_become_model_lanes_with_the_route_deadline_as_default() -> None:
    text = (
        BASE
        + 'deadline = "20s"\n'
        + 'lanes = [{ delay = "1m30s" }, { delay = "250ms", deadline = "2s", attempts = 3 }]\n'
    )
    route = parse_config(text, env={}).route[0]
    assert route.lanes_as_model() == (
        Lane(delay_s=90.0, deadline_s=20.0, attempts=1),
        Lane(delay_s=0.25, deadline_s=2.0, attempts=3),
    )


GRPC, HTTP = "grpc://127.0.0.1:50051", "http://127.0.0.1:8080/hook"


@pytest.mark.parametrize(
    ("line", "endpoint", "expected"),
    [
        # the default: a gRPC stream batches, sending what is ready (linger 0)
        ("", GRPC, ("GrpcBatch", 64, 0.0, 4 << 20)),
        ("batch = true", GRPC, ("GrpcBatch", 64, 0.0, 4 << 20)),
        ('batch = { max = 64, linger = "5ms" }', GRPC, ("GrpcBatch", 64, 0.005, 4 << 20)),
        ("batch = {}", GRPC, ("GrpcBatch", 64, 0.0, 4 << 20)),
        (
            'batch = { max = 1000, linger = "1s" }\nmax_message_bytes = 65536',
            GRPC,
            ("GrpcBatch", 1000, 1.0, 65536),
        ),
        # one delivery per call: switched off, unary, or a webhook that did not ask for batches
        ("batch = false", GRPC, ("GrpcStream",)),
        ("batch = { enabled = false, max = 8 }", GRPC, ("GrpcStream",)),
        ('transport = "unary"', GRPC, ("GrpcUnary",)),
        ('transport = "unary"\nbatch = false', GRPC, ("GrpcUnary",)),
        ("", HTTP, ("HttpBatch", 64, 0.0, 4 << 20)),  # offered: once the consumer says it
        ("batch = false", HTTP, ("Http",)),
        ("batch = true", HTTP, ("HttpBatch", 64, 0.0, 4 << 20)),
        ('batch = { max = 1, linger = "0s" }', HTTP, ("HttpBatch", 1, 0.0, 4 << 20)),
    ],
)
def test_a_route_gets_the_batching_its_config_and_endpoint_say(
    line: str, endpoint: str, expected: tuple[object, ...]
) -> None:
    text = BASE.replace(GRPC, endpoint) + line + "\n"
    route = parse_config(text, env={}).route[0]
    transport = make_transport(route, route.endpoint[0], 10)
    limits = batch_limits(route, route.endpoint[0])
    kind, *numbers = expected
    assert type(transport).__name__ == f"{kind}Transport"
    shown = parse_config(text, env={}).redacted_dict()["route"][0]["batch"]
    if not numbers:
        assert limits is None and shown is False
        return
    assert limits is not None
    assert (limits.max_items, limits.linger_s, limits.max_bytes) == tuple(numbers)
    settings = {"max": limits.max_items, "linger": format_duration(limits.linger_s)}
    offered = endpoint == HTTP and not line
    assert getattr(transport, "offered", False) is offered
    if offered:
        settings["when"] = "the consumer answers 'siding-batch: v1'"
    assert shown == settings


def test_an_http_route_to_a_url_template_never_offers_batches() -> None:
    text = BASE.replace(GRPC, "http://orders:8080/orders/{key}") + "\n"
    route = parse_config(text, env={}).route[0]
    assert not route.offers_batches(route.endpoint[0])
    assert type(make_transport(route, route.endpoint[0], 10)).__name__ == "HttpTransport"


def test_settings_are_frozen() -> None:
    route = parse_config(BASE, env={}).route[0]
    with pytest.raises(ValidationError):
        route.max_in_flight = 5  # type: ignore[misc]


def test_the_config_survives_pickling_for_spark_executors() -> None:
    text = BASE + '[route.auth]\ntoken = "tok"\n'
    config = parse_config(text, env={})
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config
    assert revealed(copy.route[0].auth.token) == "tok"
    assert hash(copy.route[0]) == hash(config.route[0])


def test_route_named_refuses_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match="no route named 'nope'"):
        parse_config(BASE, env={}).route_named("nope")


# -- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("10s", 10.0),
        ("1.5s", 1.5),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1m30s", 90.0),
        ("1h30m", 5400.0),
        ("2h0m5s100ms", 7205.1),
        ("0s", 0.0),
        (" 10s ", 10.0),
    ],
)
def test_durations_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("10", "no unit"),
        ("1.5", "no unit"),
        ("", "empty duration"),
        ("-5s", "negative"),
        ("5 s", "not a duration"),
        ("5sec", "not a duration"),
        ("30s1m", "not a duration"),
        ("1m1m", "not a duration"),
        ("1w", "not a duration"),
    ],
)
def test_malformed_durations_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**10))
def test_formatted_durations_parse_back(milliseconds: int) -> None:
    seconds = milliseconds / 1000
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=1e-6)


# -- interpolation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "x"}, "x"),
        ("pre-${A}-post", {"A": "x"}, "pre-x-post"),
        ("${A:-d}", {}, "d"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A:-d}", {"A": "x"}, "x"),
        ("${A:-}", {}, ""),
        ("${A}", {"A": ""}, ""),
        ("$${A}", {"A": "x"}, "${A}"),
        ("a$$b", {}, "a$b"),
        ("cost: 5$", {}, "cost: 5$"),
        ("$HOME", {"HOME": "/root"}, "$HOME"),
        ("${A}${B}", {"A": "1", "B": "2"}, "12"),
        ("${A}", {"A": "${B}", "B": "no"}, "${B}"),
    ],
)
def test_interpolation_expands_references(text: str, env: dict[str, str], expected: str) -> None:
    assert interpolate(text, env) == expected


@given(st.text())
def test_doubling_every_dollar_keeps_any_text_literal(text: str) -> None:
    assert interpolate(text.replace("$", "$$"), {}) == text


def test_values_from_the_environment_cannot_break_the_toml() -> None:
    tricky = 'a "quoted"\nvalue = 1\n[kafka]'
    text = BASE + '[route.auth]\ntoken = "${TOKEN}"\n'
    route = parse_config(text, env={"TOKEN": tricky}).route[0]
    assert revealed(route.auth.token) == tricky


def test_numbers_can_come_from_the_environment() -> None:
    text = BASE + 'max_in_flight = "${MAX:-200}"\ndeadline = "${DEADLINE}"\n'
    route = parse_config(text, env={"DEADLINE": "45s"}).route[0]
    assert (route.max_in_flight, route.deadline) == (200, 45.0)


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIDING_TEST_TOPIC", "from-env")
    config = parse_config(BASE.replace('"trips"', '"${SIDING_TEST_TOPIC}"'))
    assert config.route[0].topic == "from-env"


# -- kafka, spark, control -----------------------------------------------------------------------


def test_kafka_settings_pass_through_with_secrets_hidden() -> None:
    text = BASE.replace(
        '[kafka]\nbootstrap = "127.0.0.1:9092"',
        '[kafka]\nbootstrap = " a:1 , b:2 "\n"security.protocol" = "SASL_SSL"\n'
        'sasl.mechanism = "PLAIN"\nsasl.username = "svc"\nsasl.password = "${PW}"\n'
        '"linger.ms" = 5\n"enable.idempotence" = true',
    )
    kafka = parse_config(text, env={"PW": "hunter2"}).kafka
    assert kafka.client_config() == {
        "bootstrap.servers": "a:1,b:2",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "svc",
        "sasl.password": "hunter2",
        "linger.ms": 5,
        "enable.idempotence": True,
    }
    assert kafka.spark_options()["kafka.enable.idempotence"] == "true"
    assert kafka.spark_options()["kafka.linger.ms"] == "5"
    assert kafka.spark_options()["kafka.bootstrap.servers"] == "a:1,b:2"
    assert "hunter2" not in repr(kafka)


def test_spark_conf_passes_through_as_strings() -> None:
    text = (
        BASE
        + '[spark]\nmaster = "spark://m1:7077,m2:7077"\n[spark.conf]\n'
        + 'spark.executor.memory = "1g"\n"spark.ui.enabled" = false\n'
        + '"spark.hadoop.fs.s3a.secret.key" = "hunter2"\n'
    )
    spark = parse_config(text, env={}).spark
    assert spark.master == "spark://m1:7077,m2:7077"
    assert spark.conf_values() == {
        "spark.executor.memory": "1g",
        "spark.ui.enabled": "false",
        "spark.hadoop.fs.s3a.secret.key": "hunter2",
    }
    assert "hunter2" not in repr(spark)


@pytest.mark.parametrize(
    "master", ["local", "local[4]", "local[*]", "local[4,2]", "yarn", "k8s://https://k8s:6443"]
)
def test_spark_masters_are_accepted(master: str) -> None:
    assert parse_config(BASE + f'[spark]\nmaster = "{master}"\n', env={}).spark.master == master


@pytest.mark.parametrize(
    ("listen", "address"),
    [("", None), ("0.0.0.0:9464", ("0.0.0.0", 9464)), ("[::1]:0", ("::1", 0))],
)
def test_the_control_address(listen: str, address: tuple[str, int] | None) -> None:
    config = parse_config(BASE + f'[control]\nlisten = "{listen}"\n', env={})
    assert config.control.address() == address


def test_a_relative_checkpoint_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "siding.toml").write_text(BASE + '[spark]\ncheckpoint_dir = "state/cp"\n')
    config = load_config(tmp_path / "siding.toml", env={})
    assert config.spark.checkpoint_dir == str((tmp_path / "state" / "cp").resolve())


def test_the_default_checkpoint_dir_is_absolute(tmp_path: Path) -> None:
    config = parse_config(BASE, env={}, base_dir=tmp_path)
    assert config.spark.checkpoint_dir == str((tmp_path / ".siding" / "checkpoints").resolve())


def test_a_checkpoint_uri_is_kept_as_it_is(tmp_path: Path) -> None:
    text = BASE + '[spark]\ncheckpoint_dir = "s3a://bucket/siding"\n'
    config = parse_config(text, env={}, base_dir=tmp_path)
    assert config.spark.checkpoint_dir == "s3a://bucket/siding"


def test_a_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


# -- endpoints -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "parsed", "target"),
    [
        ("grpc://billing:50051", (True, False, "billing", 50051), "billing:50051"),
        ("grpcs://billing:443", (True, True, "billing", 443), "billing:443"),
        ("grpc+dns:///billing:50051", (True, False, "billing", 50051), "dns:///billing:50051"),
        ("grpcs+dns:///billing:50051", (True, True, "billing", 50051), "dns:///billing:50051"),
        ("grpc://[::1]:50051", (True, False, "::1", 50051), "[::1]:50051"),
        ("http://hooks/trips?v=1", (False, False, "hooks", 80), "hooks:80"),
        ("https://hooks.example.com/t", (False, True, "hooks.example.com", 443), None),
        ("HTTPS://hooks:8443/t", (False, True, "hooks", 8443), None),
    ],
)
def test_endpoints_are_parsed(
    url: str, parsed: tuple[bool, bool, str, int], target: str | None
) -> None:
    config = parse_config(BASE.replace("grpc://127.0.0.1:50051", url), env={})
    endpoint = config.route[0].endpoint[0]
    assert (endpoint.is_grpc, endpoint.tls, endpoint.host, endpoint.port) == parsed
    assert str(endpoint) == url
    if target is not None:
        assert endpoint.grpc_target == target


def test_a_list_of_endpoints_is_kept_in_order() -> None:
    text = BASE.replace('"grpc://127.0.0.1:50051"', '["grpc://a:1", "grpc://b:2"]')
    endpoints = parse_config(text, env={}).route[0].endpoint
    assert [e.url for e in endpoints] == ["grpc://a:1", "grpc://b:2"]


# -- secrets -------------------------------------------------------------------------------------


def revealed(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()


def _https(text: str) -> str:
    return text.replace("grpc://127.0.0.1:50051", "https://hooks.example.com/trips")


def test_secret_files_are_read_relative_to_the_config_file(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "token").write_text("tok-123\n")
    (secrets / "whsec").write_text("whsec_c2VjcmV0\n")
    (secrets / "ca.pem").write_text(PEM_CERT)
    (secrets / "c.pem").write_text(PEM_CERT)
    (secrets / "k.pem").write_text(PEM_KEY)
    (tmp_path / "siding.toml").write_text(
        _https(BASE)
        + '[route.auth]\ntoken_file = "secrets/token"\nwebhook_secret_file = "secrets/whsec"\n'
        + 'ca_file = "secrets/ca.pem"\ncert_file = "secrets/c.pem"\nkey_file = "secrets/k.pem"\n'
    )
    auth = load_config(tmp_path / "siding.toml", env={}).route[0].auth
    assert revealed(auth.token) == "tok-123"
    assert revealed(auth.webhook_secret) == "whsec_c2VjcmV0"
    assert revealed(auth.ca_pem) == PEM_CERT
    assert revealed(auth.cert_pem) == PEM_CERT
    assert revealed(auth.key_pem) == PEM_KEY
    assert auth.ca_file == str(secrets / "ca.pem")


@pytest.mark.parametrize("secret", ["whsec_c2VjcmV0", "whsec_c2VjcmV0YQ", "a-plain-shared-secret"])
def test_webhook_secrets_follow_the_signing_rules(secret: str) -> None:
    text = _https(BASE) + f'[route.auth]\nwebhook_secret = "{secret}"\n'
    assert revealed(parse_config(text, env={}).route[0].auth.webhook_secret) == secret


def test_an_empty_secret_means_not_set() -> None:
    config = parse_config(BASE + '[route.auth]\ntoken = "${TOKEN:-}"\n', env={})
    assert config.route[0].auth.token is None


def test_no_secret_shows_in_repr_str_logs_or_the_redacted_dict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = _https(
        BASE.replace(
            '[kafka]\nbootstrap = "127.0.0.1:9092"',
            '[kafka]\nbootstrap = "127.0.0.1:9092"\nsasl.password = "${S1}"\n'
            'sasl.username = "svc"\nsasl.mechanism = "PLAIN"\n'
            '[kafka.java]\n"sasl.jaas.config" = "${S2}"',
        )
    )
    text += '[spark.conf]\n"spark.authenticate.secret" = "${S3}"\n'
    text += '[route.auth]\ntoken = "${S4}"\nwebhook_secret = "${S5}"\n'
    env = {"S1": "aaa111", "S2": "bbb222", "S3": "ccc333", "S4": "ddd444", "S5": "whsec_ZWVlNTU1"}
    config = parse_config(text, env=env)
    logging.getLogger("siding.test").warning("config: %s %r", config, config)
    shown = [repr(config), str(config), json.dumps(config.redacted_dict()), caplog.text]
    for secret in [*env.values(), "eee555"]:
        assert not any(secret in text for text in shown), secret
    assert config.redacted_dict()["route"][0]["auth"]["token"] == "**********"
    assert config.kafka.client_config()["sasl.password"] == "aaa111"


def test_the_redacted_dict_reads_like_the_file() -> None:
    text = BASE + 'lanes = [{ delay = "1m30s" }]\n'
    shown = parse_config(text, env={}).redacted_dict()
    assert shown["kafka"] == {"bootstrap": "127.0.0.1:9092"}
    route = shown["route"][0]
    assert route["endpoint"] == ["grpc://127.0.0.1:50051"]
    assert (route["deadline"], route["lanes"][0]["delay"]) == ("30s", "1m30s")
    assert route["ordering"] == "unordered"
    assert json.loads(json.dumps(shown)) == shown
