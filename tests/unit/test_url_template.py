"""Webhook URL templates: parsed once (pure, every mistake a ValueError naming what is wrong),
filled per delivery with every value percent-encoded."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.config.url_template import Placeholder, parse_url_template
from siding.model import Delivery, delivery_id


def delivery(
    key: bytes | None = b"order-7",
    headers: tuple[tuple[str, bytes], ...] = (),
    topic: str = "orders",
) -> Delivery:
    return Delivery(
        id=delivery_id(topic, 3, 42),
        topic=topic,
        partition=3,
        offset=42,
        key=key,
        value=b"{}",
        headers=headers,
    )


def test_a_url_without_placeholders_is_static_and_kept_as_written() -> None:
    template = parse_url_template("http://host:8080/hook?a=b c")

    assert template.is_static
    assert (template.origin, template.parts) == ("http://host:8080/hook?a=b c", ())
    assert template.fill(delivery()) == "http://host:8080/hook?a=b c"


def test_parsing_splits_literals_and_placeholders() -> None:
    template = parse_url_template(
        "https://h/t/{topic}/{partition}/{offset}?k={key}&r={header.region}"
    )

    assert not template.is_static
    assert template.origin == "https://h"
    assert template.parts == (
        "/t/",
        Placeholder("topic"),
        "/",
        Placeholder("partition"),
        "/",
        Placeholder("offset"),
        "?k=",
        Placeholder("key"),
        "&r=",
        Placeholder("header", "region"),
    )


@pytest.mark.parametrize(
    ("url", "record", "expected"),
    [
        ("http://h/orders/{key}", delivery(), "http://h/orders/order-7"),
        ("http://h/{topic}/{partition}/{offset}", delivery(), "http://h/orders/3/42"),
        # a key is one path segment: '/', '?', '#', '%' and spaces are escaped
        ("http://h/o/{key}", delivery(key=b"a/b?c#d%e f"), "http://h/o/a%2Fb%3Fc%23d%25e%20f"),
        ("http://h/o/{key}", delivery(key="é".encode()), "http://h/o/%C3%A9"),
        ("http://h/o/{key}", delivery(key=b"\x00\xff"), "http://h/o/%00%FF"),  # binary
        ("http://h/o/{key}", delivery(key=None), "http://h/o/"),  # a null key: empty
        ("http://h/o/{key}", delivery(key=b""), "http://h/o/"),
        (
            "http://h/r/{header.region}",
            delivery(headers=(("region", b"eu west"),)),
            "http://h/r/eu%20west",
        ),
        # the last of several headers of that name, as Kafka's lastHeader; names are exact
        (
            "http://h/r/{header.region}",
            delivery(headers=(("region", b"a"), ("Region", b"x"), ("region", b"b"))),
            "http://h/r/b",
        ),
        ("http://h/r/{header.region}", delivery(), "http://h/r/"),  # a missing header: empty
        ("http://h/r/{header.a.b}", delivery(headers=(("a.b", b"1"),)), "http://h/r/1"),
        # a literal part that is not legal in a URL is escaped; a written escape stays
        ("http://h/my hook/{key}%2F", delivery(), "http://h/my%20hook/order-7%2F"),
        # the origin stays as written (an IDN host is the transport's to encode)
        ("http://bücher.example:81?k={key}", delivery(), "http://bücher.example:81?k=order-7"),
        ("http://[::1]:8080/o/{offset}", delivery(), "http://[::1]:8080/o/42"),
    ],
)
def test_filling_percent_encodes_every_value(url: str, record: Delivery, expected: str) -> None:
    assert parse_url_template(url).fill(record) == expected


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h/o/{nope}", "unknown placeholder {nope}"),
        ("http://h/o/{}", "unknown placeholder {}"),
        ("http://h/o/{header.}", "unknown placeholder {header.}"),
        ("http://h/o/{Key}", "unknown placeholder {Key}"),
        ("http://h/o/{key", "unbalanced '{' at character 12"),
        ("http://h/o/{ke{y}", "unbalanced '{' at character 12"),
        ("http://h/o/key}", "unbalanced '}' at character 15"),
        ("http://h/o/{key}}", "unbalanced '}' at character 17"),
        ("http://{topic}.example/o", "only in the path or the query"),
        ("http://h:{partition}/o", "only in the path or the query"),
        ("http://h{key}", "only in the path or the query"),
        ("{topic}://h/o", "only in the path or the query"),
    ],
)
def test_a_bad_template_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as caught:
        parse_url_template(url)

    assert repr(url) in str(caught.value)


@given(st.binary(max_size=64))
def test_a_filled_key_is_one_segment_that_decodes_back_to_the_key(key: bytes) -> None:
    filled = parse_url_template("http://h/o/{key}/tail").fill(delivery(key=key))

    segment = filled.removeprefix("http://h/o/").removesuffix("/tail")
    assert "/" not in segment and "?" not in segment and "#" not in segment
    assert unquote_to_bytes(segment) == key


@pytest.mark.parametrize("key", [b".", b"..", b"...", b"a.b"])
def test_a_key_of_dots_never_fills_a_dot_segment(key: bytes) -> None:
    # A key "." or ".." left as it is would make /orders/.. resolve to / at the server
    filled = parse_url_template("http://h/orders/{key}").fill(delivery(key=key))
    segment = filled.removeprefix("http://h/orders/")
    assert segment not in {".", ".."}
    assert unquote_to_bytes(segment) == key
