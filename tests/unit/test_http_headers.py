"""The headers of a webhook request: a pure function, tested with tables."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from siding.config.http_request import refusal
from siding.errors import ConfigError
from siding.model import Delivery, delivery_id
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.http_headers import (
    MAX_FORWARDED_VALUE_BYTES,
    build_headers,
    header_value,
    printable_key,
    rfc3339,
)
from siding.transport.signing import verify

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
TS = 1_700_000_000


BASE = Delivery(
    id=delivery_id("trips", 3, 42),
    topic="trips",
    partition=3,
    offset=42,
    key=b"rider-7",
    value=b'{"fare": 12.5}',
    timestamp_ms=1_700_000_000_123,
    attempt=2,
    lane=1,
)


def delivery(**overrides: Any) -> Delivery:
    return replace(BASE, **overrides)


def as_dict(d: Delivery, **kwargs: Any) -> dict[str, str]:
    built = build_headers(d, timestamp_s=TS, **kwargs)
    names = [name.lower() for name, _ in built.headers]
    assert len(names) == len(set(names)), f"duplicate header names: {names}"
    return {name.lower(): value for name, value in built.headers}


def test_cloudevents_webhook_and_siding_headers() -> None:
    headers = as_dict(delivery(), secret=SECRET)

    assert headers == {
        "ce-specversion": "1.0",
        "ce-id": "trips/3/42",
        "ce-source": "kafka://trips",
        "ce-type": "dev.siding.delivery",
        "ce-time": "2023-11-14T22:13:20.123Z",
        "ce-subject": "rider-7",
        "webhook-id": "trips/3/42",
        "webhook-timestamp": str(TS),
        "webhook-signature": headers["webhook-signature"],
        "siding-attempt": "2",
        "siding-lane": "1",
        "siding-topic": "trips",
        "siding-partition": "3",
        "siding-offset": "42",
        "content-type": "application/octet-stream",
    }
    assert verify(SECRET, headers, b'{"fare": 12.5}', now_s=TS) == "trips/3/42"


def test_no_secret_means_no_signature_and_a_token_means_a_bearer_header() -> None:
    headers = as_dict(delivery(), bearer_token="t0ken")

    assert "webhook-signature" not in headers
    assert headers["authorization"] == "Bearer t0ken"


def test_the_idempotency_key_is_the_delivery_id_and_static_headers_follow_sidings() -> None:
    static = (("X-Api-Key", "k3y"), ("X-Team", "billing"))
    first = build_headers(delivery(), timestamp_s=TS, static=static, idempotency_key=True)
    retried = build_headers(
        delivery(attempt=3, lane=2), timestamp_s=TS + 60, static=static, idempotency_key=True
    )

    for built in (first, retried):
        headers = dict(built.headers)
        assert headers["idempotency-key"] == "trips/3/42" == headers["webhook-id"]
        assert (headers["X-Api-Key"], headers["X-Team"]) == ("k3y", "billing")
    assert "idempotency-key" not in as_dict(delivery())


def test_a_producers_header_never_replaces_the_operators_or_the_idempotency_key() -> None:
    kafka = (("x-api-key", b"forged"), ("Idempotency-Key", b"mine"), ("app", b"1"))
    built = build_headers(
        delivery(headers=kafka), timestamp_s=TS, static=(("X-Api-Key", "k3y"),),
        idempotency_key=True,
    )  # fmt: skip

    lowered = [(name.lower(), value) for name, value in built.headers]
    assert ("x-api-key", "k3y") in lowered and ("x-api-key", "forged") not in lowered
    assert [v for n, v in lowered if n == "idempotency-key"] == ["trips/3/42"]
    assert ("app", "1") in lowered
    assert built.dropped == 2
    # Without siding's key, the producer's own Idempotency-Key is forwarded
    plain = build_headers(delivery(headers=kafka), timestamp_s=TS)
    assert ("Idempotency-Key", "mine") in plain.headers


def test_every_header_siding_writes_is_refused_as_a_static_header() -> None:
    built = build_headers(
        delivery(key=b"\x00", timestamp_ms=5), timestamp_s=TS, secret=SECRET,
        bearer_token="t", idempotency_key=True,
    )  # fmt: skip

    for name, _ in built.headers:
        assert refusal(name) is not None, name
        assert refusal(name.upper()) is not None, name
    assert refusal("X-Api-Key") is None


def test_source_and_type_are_configurable() -> None:
    headers = as_dict(delivery(), source="urn:siding:{topic}:billing", event_type="com.acme.trip")

    assert headers["ce-source"] == "urn:siding:trips:billing"
    assert headers["ce-type"] == "com.acme.trip"


def test_a_null_value_is_signed_as_an_empty_body() -> None:
    headers = as_dict(delivery(value=None), secret=SECRET)

    assert verify(SECRET, headers, b"", now_s=TS) == "trips/3/42"


@pytest.mark.parametrize(
    ("key", "subject", "siding_key"),
    [
        pytest.param(b"rider-7", "rider-7", None, id="printable"),
        pytest.param(b"a b", "a b", None, id="inner-space"),
        pytest.param(None, None, None, id="null"),
        pytest.param(b"", None, "", id="empty"),
        pytest.param(b"\x00\xff", None, "AP8=", id="binary"),
        pytest.param(b"line\r\nx", None, base64.b64encode(b"line\r\nx").decode(), id="crlf"),
        pytest.param(b" lead", None, "IGxlYWQ=", id="leading-space"),
        pytest.param("é".encode(), None, "w6k=", id="non-ascii"),
    ],
)
def test_the_key_is_the_subject_when_printable_else_base64(
    key: bytes | None, subject: str | None, siding_key: str | None
) -> None:
    headers = as_dict(delivery(key=key))

    assert headers.get("ce-subject") == subject
    assert headers.get("siding-key") == siding_key


@pytest.mark.parametrize(
    ("timestamp_ms", "expected"),
    [
        (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
        (1_000, "1970-01-01T00:00:01.000Z"),
        (1_700_000_000_005, "2023-11-14T22:13:20.005Z"),
    ],
)
def test_rfc3339(timestamp_ms: int, expected: str) -> None:
    assert rfc3339(timestamp_ms) == expected


@pytest.mark.parametrize("timestamp_ms", [0, -1])
def test_an_unknown_timestamp_has_no_ce_time(timestamp_ms: int) -> None:
    assert "ce-time" not in as_dict(delivery(timestamp_ms=timestamp_ms))


# (kafka header name, value, forwarded?) — anything unsafe or reserved is dropped and counted.
FORWARDING = [
    pytest.param("trace-id", b"abc", True, id="plain"),
    pytest.param("X_Legacy", b"v", True, id="underscore-is-a-token-char"),
    pytest.param("note", "naïve ✓".encode(), True, id="utf8"),
    pytest.param("note", b"tab\there", True, id="tab"),
    pytest.param("note", b"", True, id="empty-value"),
    pytest.param("evil", b"a\r\nx-injected: 1", False, id="crlf"),
    pytest.param("evil", b"a\nb", False, id="lf"),
    pytest.param("evil", b"a\rb", False, id="cr"),
    pytest.param("evil", b"a\x00b", False, id="nul"),
    pytest.param("evil", b"a\x1bb", False, id="other-control"),
    pytest.param("evil", b"a\x7fb", False, id="del"),
    pytest.param("latin1", b"caf\xe9", False, id="not-utf8"),
    pytest.param("big", b"x" * (MAX_FORWARDED_VALUE_BYTES + 1), False, id="too-long"),
    pytest.param("bad name", b"v", False, id="space-in-name"),
    pytest.param("bad:name", b"v", False, id="colon-in-name"),
    pytest.param("", b"v", False, id="empty-name"),
    pytest.param("naïve", b"v", False, id="non-ascii-name"),
    pytest.param("ce-id", b"forged", False, id="ce-prefix"),
    pytest.param("CE-Type", b"forged", False, id="ce-prefix-any-case"),
    pytest.param("webhook-signature", b"v1,forged", False, id="webhook-prefix"),
    pytest.param("siding-attempt", b"99", False, id="siding-prefix"),
    pytest.param("Authorization", b"Bearer stolen", False, id="authorization"),
    pytest.param("host", b"evil.example", False, id="host"),
    pytest.param("content-length", b"0", False, id="content-length"),
    pytest.param("Transfer-Encoding", b"chunked", False, id="transfer-encoding"),
    pytest.param("connection", b"close", False, id="connection"),
    pytest.param("expect", b"100-continue", False, id="expect"),
    pytest.param("upgrade", b"h2c", False, id="upgrade"),
    # a producer's encoding header would make the SDKs inflate the value before verifying a
    # signature made over it as stored: 401, and a route backing off for good
    pytest.param("Content-Encoding", b"gzip", False, id="content-encoding"),
]


@pytest.mark.parametrize(("name", "value", "forwarded"), FORWARDING)
def test_kafka_header_forwarding(name: str, value: bytes, forwarded: bool) -> None:
    built = build_headers(delivery(headers=((name, value),)), timestamp_s=TS, secret=SECRET)
    ours = build_headers(delivery(), timestamp_s=TS, secret=SECRET)

    extra = [pair for pair in built.headers if pair not in ours.headers]
    if forwarded:
        assert extra == [(name, value.decode())]
        assert built.dropped == 0
    else:
        assert extra == []
        assert built.dropped == 1
        assert len(built.headers) == len(ours.headers)


def test_a_kafka_content_type_becomes_the_request_content_type() -> None:
    headers = (("Content-Type", b"text/plain"), ("content-type", b"application/json"))

    built = build_headers(delivery(headers=headers), timestamp_s=TS)

    assert [v for n, v in built.headers if n.lower() == "content-type"] == ["application/json"]
    assert built.dropped == 0


def test_an_unsafe_kafka_content_type_is_dropped_for_the_default() -> None:
    built = build_headers(delivery(headers=(("content-type", b"a\r\nb"),)), timestamp_s=TS)

    assert ("content-type", "application/octet-stream") in built.headers
    assert built.dropped == 1


def test_repeated_kafka_headers_are_all_forwarded_in_order() -> None:
    headers = (("tag", b"a"), ("tag", b"b"))

    built = build_headers(delivery(headers=headers), timestamp_s=TS)

    assert [v for n, v in built.headers if n == "tag"] == ["a", "b"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"ok", "ok"), (b"\xff", None), (b"a\rb", None), (b"", "")],
)
def test_header_value(raw: bytes, expected: str | None) -> None:
    assert header_value(raw) == expected


@pytest.mark.parametrize(
    ("key", "expected"), [(b"k", "k"), (b"", None), (None, None), (b"k ", None), (b"\x01", None)]
)
def test_printable_key(key: bytes | None, expected: str | None) -> None:
    assert printable_key(key) == expected


# --- configuration is checked when the transport is built, never on the first delivery ---


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        pytest.param({"url": "ftp://host/x"}, "endpoint", id="scheme"),
        pytest.param({"url": "http:///nohost"}, "endpoint", id="no-host"),
        pytest.param({"secret": "whsec_!!"}, "secret", id="secret"),
        pytest.param({"bearer_token": "a\r\nb"}, "bearer_token", id="token-crlf"),
        pytest.param({"bearer_token": "a b"}, "bearer_token", id="token-space"),
        pytest.param({"source": "kafka://x\n"}, "source", id="source"),
        pytest.param({"event_type": ""}, "event_type", id="type"),
        pytest.param({"max_connections": 0}, "max_connections", id="connections"),
        pytest.param({"max_response_bytes": -1}, "max_response_bytes", id="response-bytes"),
        pytest.param({"ca_file": "/nonexistent/ca.pem"}, "ca_file", id="missing-ca"),
        pytest.param({"ca_file": "/etc/hosts", "insecure": True}, "ca_file", id="ca-and-insecure"),
        pytest.param({"url": "https://h/o/{nope}"}, "endpoint", id="template"),
        pytest.param({"method": "GET"}, "method", id="method"),
        pytest.param({"headers": (("Host", "x"),)}, "headers.Host", id="own-header"),
        pytest.param({"headers": (("X-A", "a\r\nb"),)}, "headers.X-A", id="header-crlf"),
    ],
)
def test_bad_transport_settings_are_config_errors(kwargs: dict[str, Any], key: str) -> None:
    settings: dict[str, Any] = {"url": "https://consumer.example/hook"} | kwargs

    with pytest.raises(ConfigError) as caught:
        HttpTransport(WebhookSpec(**settings))
    assert caught.value.key == key


def test_the_repr_never_shows_credentials() -> None:
    transport = HttpTransport(
        WebhookSpec(
            "https://user:hunter2@consumer.example/hook", secret=SECRET, bearer_token="t0ken"
        )
    )

    text = repr(transport)
    assert "consumer.example/hook" in text
    for secret in ("hunter2", "user", SECRET, "t0ken"):
        assert secret not in text
