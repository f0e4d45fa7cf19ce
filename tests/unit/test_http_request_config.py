"""``[route.http]`` and webhook URL templates in siding.toml: the defaults, the values, and every
mistake refused with a ConfigError naming its key (a header's value never shown)."""

from __future__ import annotations

import pickle

import pytest

from siding.config import parse_config, parse_route
from siding.errors import ConfigError
from siding.transport.factory import webhook_spec
from siding.transport.http import HttpTransport

BASE = """
[kafka]
bootstrap = "127.0.0.1:9092"

[[route]]
name = "orders"
topic = "orders"
group = "billing"
"""
HOOK = 'endpoint = "http://127.0.0.1:8080/orders/{key}"\n'
ENV = {"ORDERS_API_KEY": "s3cret-value"}


def refused(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env=ENV if env is None else env)
    assert "s3cret-value" not in str(caught.value)
    return caught.value


def test_a_webhook_route_posts_with_an_idempotency_key_by_default() -> None:
    route = parse_config(BASE + 'endpoint = "http://h/hook"\n', env={}).route[0]

    assert (route.http.method, route.http.headers, route.http.idempotency_key) == (
        "POST",
        (),
        True,
    )
    spec = webhook_spec(route, route.endpoint[0], 10)
    assert (spec.method, spec.headers, spec.idempotency_key) == ("POST", (), True)


def test_method_headers_from_the_environment_and_a_template_reach_the_transport() -> None:
    text = (
        BASE
        + HOOK
        + '[route.http]\nmethod = "put"\nidempotency_key = false\n'
        + 'headers = { X-Api-Key = "${ORDERS_API_KEY}", X-Team = "billing" }\n'
    )
    config = parse_config(text, env=ENV)
    route = config.route[0]

    spec = webhook_spec(route, route.endpoint[0], 10)
    assert spec.method == "PUT"
    assert spec.headers == (("X-Api-Key", "s3cret-value"), ("X-Team", "billing"))
    assert spec.idempotency_key is False
    assert spec.url == "http://127.0.0.1:8080/orders/{key}"
    assert not route.endpoint[0].url_template().is_static
    # Values are secrets: masked for display, never in a repr
    shown = config.redacted_dict()["route"][0]["http"]
    assert shown["headers"] == {"X-Api-Key": "**********", "X-Team": "**********"}
    for text_form in (repr(config), repr(spec), str(shown), repr(HttpTransport(spec))):
        assert "s3cret-value" not in text_form
    # and the route still travels to Spark's workers
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and hash(copy.route[0]) == hash(route)


def test_a_route_made_through_the_control_api_takes_the_same_table() -> None:
    route = parse_route(
        {
            "name": "api",
            "topic": "orders",
            "group": "g",
            "endpoint": "http://h/o/{key}",
            "http": {"method": "PATCH", "headers": {"X-Team": "t"}},
        }
    )

    assert route.http.method == "PATCH"
    with pytest.raises(ConfigError, match=r"^route\[api\]\.http\.headers\.host: siding sets"):
        parse_route(
            {
                "name": "api",
                "topic": "orders",
                "group": "g",
                "endpoint": "http://h/",
                "http": {"headers": {"host": "x"}},
            }
        )


# (what is appended to the route, the key, a fragment of the message)
ERRORS = [
    (HOOK + '[route.http]\nmethod = "GET"', "route[orders].http.method", "use one of POST"),
    (HOOK + '[route.http]\nmethod = "DELETE"', "route[orders].http.method", "PUT, PATCH"),
    (HOOK + "[route.http]\nmethod = 1", "route[orders].http.method", "use one of"),
    (HOOK + "[route.http]\nverb = 'PUT'", "route[orders].http.verb", "unknown key"),
    (HOOK + '[route.http]\nheaders = "X-A: b"', "route[orders].http.headers", "a table"),
    (
        HOOK + '[route.http]\nheaders = { X-Api-Key = "${NOT_SET}" }',
        "route[orders].http.headers.X-Api-Key",
        "environment variable NOT_SET is not set",
    ),
    (
        HOOK + '[route.http]\nheaders = { X-A = "line\\nbreak${ORDERS_API_KEY}" }',
        "route[orders].http.headers.X-A",
        "control character",
    ),
    (
        HOOK + "[route.http]\nheaders = { X-A = 5 }",
        "route[orders].http.headers.X-A",
        "expected a string",
    ),
    (
        HOOK + '[route.http]\nheaders = { "X A" = "v" }',
        'route[orders].http.headers."X A"',
        "not an HTTP header name",
    ),
    (
        HOOK + '[route.http]\nheaders = { X-A = "1", x-a = "2" }',
        "route[orders].http.headers.x-a",
        "given twice",
    ),
    (
        HOOK + '[route.http]\nheaders = { Authorization = "Basic x" }',
        "route[orders].http.headers.Authorization",
        "route.auth.token",
    ),
    (
        HOOK + '[route.http]\nheaders = { Idempotency-Key = "k" }',
        "route[orders].http.headers.Idempotency-Key",
        "siding sets this header itself",
    ),
    (
        'endpoint = "grpc://127.0.0.1:50051"\n[route.http]\nmethod = "PUT"',
        "route[orders].http",
        "only for HTTP endpoints",
    ),
    (
        'endpoint = "http://h/o/{order}"',
        "route[orders].endpoint",
        "unknown placeholder {order}: use {topic}, {partition}, {offset}, {key}",
    ),
    ('endpoint = "http://h/o/{key"', "route[orders].endpoint", "unbalanced '{'"),
    ('endpoint = "http://h/o/key}"', "route[orders].endpoint", "unbalanced '}'"),
    ('endpoint = "http://{topic}.h/o"', "route[orders].endpoint", "only in the path or the query"),
    (
        'endpoint = ["http://a/o", "http://b/o/{key}"]\nbatch = { max = 8 }',
        "route[orders].endpoint[1]",
        "needs one request per record",
    ),
    (HOOK + "batch = { max = 8 }", "route[orders].endpoint", "leave out batch or the placeholders"),
]


@pytest.mark.parametrize(("extra", "key", "says"), ERRORS)
def test_a_bad_request_shape_names_its_key(extra: str, key: str, says: str) -> None:
    error = refused(BASE + extra + "\n")

    assert error.key == key
    assert says in error.message


@pytest.mark.parametrize(
    "name",
    [
        "webhook-id",
        "webhook-signature",
        "webhook-timestamp",
        "Content-Type",
        "content-length",
        "Host",
        "ce-id",
        "siding-attempt",
        "user-agent",
        "transfer-encoding",
    ],
)
def test_headers_siding_owns_are_refused(name: str) -> None:
    error = refused(BASE + HOOK + f'[route.http]\nheaders = {{ "{name}" = "x" }}\n')

    assert error.key.endswith(f"http.headers.{name}")
    assert "siding sets this header itself" in error.message
