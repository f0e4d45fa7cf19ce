"""Every invalid siding.toml is refused with a ConfigError naming the key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from siding.config import parse_config
from siding.errors import ConfigError

BASE = """
[kafka]
bootstrap = "127.0.0.1:9092"

[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://127.0.0.1:50051"
"""
PEM_CERT = "-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n"


def refused(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env=env or {})
    return caught.value


# (what is appended to the billing route, the key, a fragment of the message)
ROUTE_ERRORS = [
    ("max_in_flight = 0", "route[billing].max_in_flight", "must be at least 1"),
    ("max_in_flight = 2.5", "route[billing].max_in_flight", "valid integer"),
    ("max_in_flight = true", "route[billing].max_in_flight", "not true/false"),
    (
        "max_inflight = 5",
        "route[billing].max_inflight",
        "unknown key (did you mean 'max_in_flight'",
    ),
    ('ordering = "keyed"', "route[billing].ordering", "'unordered' or 'key'"),
    ('transport = "bidi"', "route[billing].transport", "'stream' or 'unary'"),
    ('deadline = "0s"', "route[billing].deadline", "longer than 0s"),
    ("deadline = 30", "route[billing].deadline", "bare number 30 (ambiguous unit)"),
    ('deadline = "30"', "route[billing].deadline", "has no unit (ambiguous)"),
    ('deadline = "30 seconds"', "route[billing].deadline", "is not a duration"),
    ('deadline = "30s1m"', "route[billing].deadline", "is not a duration"),
    ("rate_limit = -1", "route[billing].rate_limit", "must be at least 0"),
    ('starting_offsets = "middle"', "route[billing].starting_offsets", "'earliest' or 'latest'"),
    ("min_partitions = -1", "route[billing].min_partitions", "must be at least 0"),
    ("max_offsets_per_trigger = 0", "route[billing].max_offsets_per_trigger", "must be at least 1"),
    ('lanes = [{ delay = "-1s" }]', "route[billing].lanes[0].delay", "negative durations"),
    ("lanes = [{ delay = 5 }]", "route[billing].lanes[0].delay", "bare number 5"),
    ("lanes = [{ deadline = '1s' }]", "route[billing].lanes[0].delay", "required key is missing"),
    (
        'lanes = [{ delay = "1s" }, { delay = "1s", attempts = 0 }]',
        "route[billing].lanes[1].attempts",
        "must be at least 1",
    ),
    (
        'lanes = [{ delay = "1s", dealy = "2s" }]',
        "route[billing].lanes[0].dealy",
        "unknown key (did you mean 'delay'?)",
    ),
    ('lanes = [{ delay = "1s", deadline = "0s" }]', "route[billing].lanes[0].deadline", "0s"),
    ("lanes = [" + '{ delay = "1s" },' * 11 + "]", "route[billing].lanes", "at most 10"),
    ('dlq = "trips"', "route[billing].dlq", "must not be the source topic"),
    ('dlq = "dead letters"', "route[billing].dlq", "not a legal Kafka topic name"),
    (f'dlq = "{"d" * 250}"', "route[billing].dlq", "not a legal Kafka topic name"),
    ('max_retry_after = "-1s"', "route[billing].max_retry_after", "negative"),
    ("dlq_flood_ratio = 1.5", "route[billing].dlq_flood_ratio", "must be at most 1"),
    ("dlq_flood_min_batch = 0", "route[billing].dlq_flood_min_batch", "must be at least 1"),
    ('progress_interval = "2m"', "route[billing].progress_interval", "at most 60s"),
    ('progress_interval = "-1s"', "route[billing].progress_interval", "negative"),
    ("progress_interval = 250", "route[billing].progress_interval", "bare number 250"),
    (
        "[route.breaker]\nfailure_threshold = 0",
        "route[billing].breaker.failure_threshold",
        "at least 1",
    ),
    (
        '[route.breaker]\nopen_for = "10s"\nmax_open_for = "5s"',
        "route[billing].breaker.max_open_for",
        "at least open_for",
    ),
    ("[route.breaker]\nopen = '1s'", "route[billing].breaker.open", "did you mean 'open_for'?"),
    (
        "max_in_flight = 8\n[route.adaptive]\nmin_in_flight = 9",
        "route[billing].adaptive.min_in_flight",
        "must not exceed max_in_flight",
    ),
    ("[route.adaptive]\nenabled = 'maybe'", "route[billing].adaptive.enabled", "boolean"),
    (
        "[route.adaptive]\nlatency = true\nlatency_tolerance = 1",
        "route[billing].adaptive.latency_tolerance",
        "greater than 1",
    ),
    (
        "[route.adaptive]\nlatency_tolerance = 3",
        "route[billing].adaptive.latency_tolerance",
        "only applies with latency = true",
    ),
    (
        "[route.adaptive]\nenabled = false\nlatency = true",
        "route[billing].adaptive.latency",
        "needs enabled = true",
    ),
    ("[route.adaptive]\nlatency = 'sometimes'", "route[billing].adaptive.latency", "boolean"),
    (
        "[route.adaptive]\nlatency_limit = true",
        "route[billing].adaptive.latency_limit",
        "unknown key (did you mean 'latency'",
    ),
    (
        '[route.auth]\nwebhook_secret = "whsec_c2VjcmV0"',
        "route[billing].auth.webhook_secret",
        "HTTP",
    ),
    (f'[route.auth]\nca_pem = "{PEM_CERT}"', "route[billing].auth.ca_pem", "needs a TLS endpoint"),
    ("[route.auth]\npassword = 'x'", "route[billing].auth.password", "unknown key"),
    ("batch = { max = 0 }", "route[billing].batch.max", "must be at least 1"),
    ("batch = { max = 1001 }", "route[billing].batch.max", "must be at most 1000"),
    ("batch = { max = true }", "route[billing].batch.max", "not true/false"),
    ('batch = { linger = "2s" }', "route[billing].batch.linger", "must be at most 1s"),
    ("batch = { linger = 5 }", "route[billing].batch.linger", "bare number 5"),
    ('batch = { linger = "-1ms" }', "route[billing].batch.linger", "negative"),
    ("batch = { maxx = 5 }", "route[billing].batch.maxx", "unknown key (did you mean 'max'?)"),
    ("batch = 64", "route[billing].batch", "expected a table, or true / false"),
    ('batch = "off"', "route[billing].batch", "expected a table, or true / false"),
    ("batch = { enabled = 'maybe' }", "route[billing].batch.enabled", "boolean"),
    ('transport = "unary"\nbatch = { max = 8 }', "route[billing].batch", "transport = 'stream'"),
    ('transport = "unary"\nbatch = true', "route[billing].batch", "transport = 'stream'"),
    ('compression = "zstd"', "route[billing].compression", "'none' or 'gzip'"),
    ("compression = true", "route[billing].compression", "'none' or 'gzip'"),
    ('compression = "gzip"\ncompress_above = -1', "route[billing].compress_above", "at least 0"),
    ('compression = "gzip"\ncompress_above = "1k"', "route[billing].compress_above", "integer"),
    ("compress_above = 512", "route[billing].compress_above", "compression = 'gzip'"),
]


@pytest.mark.parametrize(("extra", "key", "fragment"), ROUTE_ERRORS)
def test_route_values_that_cannot_work_are_refused_with_their_key(
    extra: str, key: str, fragment: str
) -> None:
    error = refused(f"{BASE}{extra}\n")
    assert error.key == key
    assert fragment in error.message


ENDPOINT_ERRORS = [
    ('"ftp://billing:21"', "unsupported scheme"),
    ('"billing:50051"', "unsupported scheme"),
    ('"grpc://billing"', "gRPC endpoints need a port"),
    ('"grpc://:50051"', "has no host"),
    ('"grpc://billing:50051/deliver"', "no path or query"),
    ('"grpc+dns://billing:50051"', "three slashes"),
    ('"http://billing:99999/hook"', "not a number in 1-65535"),
    ('"http://billing:0/hook"', "port 0"),
    ('"https://billing/hook#frag"', "#fragment"),
    ("[]", "non-empty list"),
    ("42", "expected a URL"),
    ('["grpc://a:1", "http://b/hook"]', "same scheme"),
    ('["grpc://a:1", "grpc://a:1"]', "listed twice"),
]


@pytest.mark.parametrize(("endpoint", "fragment"), ENDPOINT_ERRORS)
def test_bad_endpoints_are_refused(endpoint: str, fragment: str) -> None:
    text = BASE.replace('endpoint = "grpc://127.0.0.1:50051"', f"endpoint = {endpoint}")
    error = refused(text)
    assert error.key == "route[billing].endpoint"
    assert fragment in error.message


def test_credentials_in_an_endpoint_url_are_refused_without_echoing_them() -> None:
    text = BASE.replace("grpc://127.0.0.1:50051", "https://user:hunter2@billing/hook")
    error = refused(text)
    assert "credentials in the URL" in error.message
    assert "hunter2" not in str(error)


def test_a_bad_webhook_secret_is_refused_without_echoing_it() -> None:
    text = BASE.replace("grpc://127.0.0.1:50051", "https://billing/hook")
    error = refused(text + '[route.auth]\nwebhook_secret = "whsec_not base64 hunter2!"\n')
    assert error.key == "route[billing].auth.webhook_secret"
    assert "hunter2" not in str(error)


def test_transport_is_refused_for_http_endpoints() -> None:
    text = BASE.replace("grpc://127.0.0.1:50051", "https://billing/hook")
    error = refused(text + 'transport = "unary"\n')
    assert (error.key, error.message) == (
        "route[billing].transport",
        "only applies to gRPC endpoints",
    )


TOP_ERRORS = [
    ("", "kafka", "required key is missing"),
    ("[kafka]\n", "kafka.bootstrap", "required key is missing"),
    ('[kafka]\nbootstrap = "broker"', "kafka.bootstrap", "must be host:port"),
    ('[kafka]\nbootstrap = " , "', "kafka.bootstrap", "empty"),
    ('[kafka]\nbootstrap = "a:1"\n"group.id" = "x"', 'kafka."group.id"', "set per route"),
    ('[kafka]\nbootstrap = "a:1"\n"bootstrap.servers" = "x"', 'kafka."bootstrap.servers"', "use"),
    (
        '[kafka]\nbootstrap = "a:1"\nenable.auto.commit = true',
        'kafka."enable.auto.commit"',
        "commits",
    ),
    ('[kafka]\nbootstrap = "a:1"\n"kafka.acks" = "all"', 'kafka."kafka.acks"', "drop the 'kafka."),
    ('[kafka]\nbootstrap = "a:1"\n"Acks" = "all"', "kafka.Acks", "not a property name"),
    ('[kafka]\nbootstrap = "a:1"\n"acks" = ["all"]', "kafka.acks", "string, number or boolean"),
]


@pytest.mark.parametrize(("kafka", "key", "fragment"), TOP_ERRORS)
def test_bad_kafka_tables_are_refused(kafka: str, key: str, fragment: str) -> None:
    route = BASE[BASE.index("[[route]]") :]
    error = refused(f"{kafka}\n{route}")
    assert error.key == key
    assert fragment in error.message


TABLE_ERRORS = [
    ('[spark]\nmaster = "mesos://m:5050"', "spark.master", "use local[*]"),
    ('[spark]\ntrigger = "fast"', "spark.trigger", "is not a duration"),
    ('[spark]\nconf = { "spark.master" = "yarn" }', 'spark.conf."spark.master"', "spark.master"),
    ("[spark]\nconf = { x = [1] }", "spark.conf.x", "string, number or boolean"),
    ('[spark]\ncheckpoint = "/tmp"', "spark.checkpoint", "did you mean 'checkpoint_dir'?"),
    ('[control]\nlisten = "9464"', "control.listen", "must be host:port"),
    ('[control]\nlisten = "[::1]"', "control.listen", "must be host:port"),
    ("[routes]\nx = 1", "routes", "unknown key (did you mean 'route'?)"),
]


@pytest.mark.parametrize(("table", "key", "fragment"), TABLE_ERRORS)
def test_bad_spark_and_control_tables_are_refused(table: str, key: str, fragment: str) -> None:
    error = refused(f"{BASE}\n{table}\n")
    assert error.key == key
    assert fragment in error.message


def test_a_config_without_routes_is_refused() -> None:
    error = refused('[kafka]\nbootstrap = "a:1"\n')
    assert error.key == "route"
    assert error.message.startswith("at least one [[route]] is required (or a [control] token")


def test_a_table_given_as_a_value_is_refused() -> None:
    error = refused('control = "on"\n' + BASE)
    assert (error.key, error.message) == ("control", "expected a table")


def test_a_single_route_table_asks_for_an_array_of_tables() -> None:
    error = refused(BASE.replace("[[route]]", "[route]"))
    assert (error.key, error.message) == ("route", "write each route as a [[route]] table")


def test_lanes_must_be_a_list() -> None:
    error = refused(BASE + '[route.lanes]\ndelay = "1s"\n')
    assert (error.key, error.message) == ("route[billing].lanes", "expected a list")


def test_an_unnamed_route_is_named_by_its_index() -> None:
    text = BASE.replace('name = "billing"\n', "") + "max_in_flight = 0\n"
    assert refused(text).key == "route[0].max_in_flight"


def test_two_routes_with_the_same_name_are_refused() -> None:
    second = '[[route]]\nname = "billing"\ntopic = "rides"\ngroup = "g"\nendpoint = "grpc://a:1"\n'
    error = refused(BASE + second)
    assert error.key == "route[billing].name"
    assert "another route is named 'billing'" in error.message


def test_two_routes_with_the_same_topic_and_group_are_refused() -> None:
    second = '[[route]]\ntopic = "trips"\ngroup = "billing"\nendpoint = "grpc://a:1"\n'
    error = refused(BASE + second)
    assert (error.key, error.message) == (
        "route[1].group",
        "another route has the same topic and group",
    )


def test_route_names_that_differ_only_in_dot_and_underscore_are_refused() -> None:
    first = BASE.replace('name = "billing"', 'name = "trips.billing"')
    second = (
        '[[route]]\nname = "trips_billing"\ntopic = "t2"\ngroup = "g"\nendpoint = "grpc://a:1"\n'
    )
    error = refused(first + second)
    assert error.key == "route[trips_billing].name"
    assert "'.' versus '_'" in error.message


def test_a_default_name_that_is_not_safe_asks_for_an_explicit_name() -> None:
    text = BASE.replace('name = "billing"\n', "").replace('group = "billing"', 'group = "my group"')
    error = refused(text)
    assert error.key == "route[0].name"
    assert "set name explicitly" in error.message


def test_an_empty_group_is_refused() -> None:
    error = refused(BASE.replace('group = "billing"', 'group = ""'))
    assert (error.key, error.message) == ("route[billing].group", "must not be empty")


def test_illegal_topic_names_are_refused() -> None:
    error = refused(BASE.replace('topic = "trips"', 'topic = "trips/2024"'))
    assert error.key == "route[billing].topic"
    assert "not a legal Kafka topic name" in error.message


@pytest.mark.parametrize("name", ["..", "a b", "x" * 201, "ünïcode", ""])
def test_unsafe_route_names_are_refused(name: str) -> None:
    error = refused(BASE.replace('name = "billing"', f'name = "{name}"'))
    assert error.key.endswith(".name")
    assert "not a safe route name" in error.message


def test_a_toml_syntax_error_gives_line_and_column() -> None:
    error = refused('[kafka]\nbootstrap = "a:1"\nmax = = 3\n')
    assert error.key == ""
    assert "invalid TOML: line 3, column" in error.message


def test_an_unset_variable_names_the_key_and_the_variable() -> None:
    error = refused(BASE + '[route.auth]\ntoken = "${BILLING_TOKEN}"\n')
    assert error.key == "route[billing].auth.token"
    assert "BILLING_TOKEN is not set" in error.message


def test_a_malformed_reference_is_refused() -> None:
    error = refused(BASE.replace('"trips"', '"${1TOPIC}"'))
    assert error.key == "route[billing].topic"
    assert "bad reference" in error.message


def test_a_secret_given_inline_and_as_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    text = BASE + f'[route.auth]\ntoken = "t"\ntoken_file = "{tmp_path / "token"}"\n'
    error = refused(text)
    assert error.key == "route[billing].auth.token_file"
    assert "not both" in error.message


def test_an_unreadable_secret_file_is_refused_with_its_key(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    error = refused(BASE + f'[route.auth]\ntoken_file = "{missing}"\n')
    assert error.key == "route[billing].auth.token_file"
    assert f"cannot read {missing}" in error.message


def test_a_file_that_is_not_pem_is_refused_under_its_file_key(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    text = BASE.replace("grpc://", "grpcs://") + f'[route.auth]\nca_file = "{tmp_path}/ca.pem"\n'
    error = refused(text)
    assert error.key == "route[billing].auth.ca_file"
    assert "not PEM text" in error.message


def test_a_client_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text(PEM_CERT.replace("\\n", "\n"))
    text = BASE.replace("grpc://", "grpcs://") + f'[route.auth]\ncert_file = "{tmp_path}/c.pem"\n'
    error = refused(text)
    assert error.key == "route[billing].auth.key_file"
    assert "needs both cert_file and key_file" in error.message


def test_several_problems_are_counted() -> None:
    error = refused(BASE + "max_in_flight = 0\nmin_partitions = -1\n")
    assert error.message.endswith("(and 1 more problem)")
