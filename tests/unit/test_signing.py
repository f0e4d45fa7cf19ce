"""Standard Webhooks signing: interop with the reference package, and every way a check fails."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from siding.errors import ConfigError, SidingError
from siding.transport.signing import WebhookVerificationError, secret_key, sign, verify

KEY = b"0123456789abcdef0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(KEY).decode()
NOW = 1_700_000_000
MSG_ID = "trips/3/42"
BODY = b'{"fare": 12.5}'


def headers_for(
    msg_id: str = MSG_ID, timestamp_s: int = NOW, body: bytes = BODY, secret: str = SECRET
) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": sign(secret, msg_id, timestamp_s, body),
    }


# --- interop with the reference implementation (PyPI `standardwebhooks`) ---


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        pytest.param(SECRET, SECRET, id="whsec-base64"),
        pytest.param(SECRET.rstrip("="), SECRET, id="whsec-unpadded"),
        pytest.param("plain-shared-secret", b"plain-shared-secret", id="raw-utf8"),
    ],
)
def test_our_signature_verifies_with_the_reference_package(ours: str, theirs: str | bytes) -> None:
    # Given a signature made by siding for "now"
    now = int(time.time())
    headers = headers_for(timestamp_s=now, secret=ours)

    # When the reference verifier checks it, Then it accepts (it raises otherwise)
    Webhook(theirs).verify(BODY, headers, json_parse=False)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        pytest.param(SECRET, SECRET, id="whsec-base64"),
        pytest.param("plain-shared-secret", b"plain-shared-secret", id="raw-utf8"),
    ],
)
def test_reference_signature_verifies_with_ours(ours: str, theirs: str | bytes) -> None:
    signature = Webhook(theirs).sign(MSG_ID, datetime.fromtimestamp(NOW, tz=UTC), BODY.decode())
    headers = {"webhook-id": MSG_ID, "webhook-timestamp": str(NOW), "webhook-signature": signature}

    assert verify(ours, headers, BODY, now_s=NOW) == MSG_ID


@given(
    key=st.binary(min_size=1, max_size=64),
    msg_id=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1),
    body=st.text(),
    timestamp_s=st.integers(min_value=0, max_value=4_000_000_000),
)
def test_signatures_are_identical_to_the_reference(
    key: bytes, msg_id: str, body: str, timestamp_s: int
) -> None:
    secret = "whsec_" + base64.b64encode(key).decode()
    theirs = Webhook(secret).sign(msg_id, datetime.fromtimestamp(timestamp_s, tz=UTC), body)

    assert sign(secret, msg_id, timestamp_s, body.encode()) == theirs


# --- what verification checks ---


def test_verify_returns_the_webhook_id_and_ignores_header_case() -> None:
    headers = {name.upper(): value for name, value in headers_for().items()}

    assert verify(SECRET, headers, BODY, now_s=NOW) == MSG_ID


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_named(missing: str) -> None:
    headers = headers_for()
    del headers[missing]

    with pytest.raises(WebhookVerificationError, match=missing) as caught:
        verify(SECRET, headers, BODY, now_s=NOW)
    assert caught.value.problem == "missing-header"


ARABIC_INDIC_DIGITS = "\u0661\u0667\u0660\u0660"  # str.isdigit() says yes; int() would accept them


@pytest.mark.parametrize(
    "timestamp", ["soon", "1.7e9", "-1700000000", "+1700000000", "1" * 40, ARABIC_INDIC_DIGITS]
)
def test_a_timestamp_that_is_not_an_integer_is_refused(timestamp: str) -> None:
    headers = headers_for() | {"webhook-timestamp": timestamp}

    with pytest.raises(WebhookVerificationError) as caught:
        verify(SECRET, headers, BODY, now_s=NOW)
    assert caught.value.problem == "bad-timestamp"


@pytest.mark.parametrize(
    ("age_s", "problem"),
    [
        (300, None),
        (301, "stale-timestamp"),
        (-300, None),
        (-301, "future-timestamp"),
        (86_400, "stale-timestamp"),
    ],
)
def test_the_timestamp_must_be_within_tolerance(age_s: int, problem: str | None) -> None:
    headers = headers_for(timestamp_s=NOW - age_s)

    if problem is None:
        assert verify(SECRET, headers, BODY, tolerance_s=300, now_s=NOW) == MSG_ID
    else:
        with pytest.raises(WebhookVerificationError) as caught:
            verify(SECRET, headers, BODY, tolerance_s=300, now_s=NOW)
        assert caught.value.problem == problem


def test_the_wrong_secret_is_a_bad_signature() -> None:
    headers = headers_for(secret="whsec_" + base64.b64encode(b"another key").decode())

    with pytest.raises(WebhookVerificationError) as caught:
        verify(SECRET, headers, BODY, now_s=NOW)
    assert caught.value.problem == "bad-signature"


def test_any_one_of_several_signatures_may_match() -> None:
    # Given a rotated secret: old signature, an asymmetric one we cannot check, junk, then ours
    good = headers_for()
    old = sign("whsec_" + base64.b64encode(b"old key").decode(), MSG_ID, NOW, BODY)
    signatures = f"{old} v1a,AAAA v1,!!notbase64!! nocomma {good['webhook-signature']}"

    assert verify(SECRET, good | {"webhook-signature": signatures}, BODY, now_s=NOW) == MSG_ID


def test_signatures_of_other_schemes_alone_do_not_pass() -> None:
    signature = headers_for()["webhook-signature"].replace("v1,", "v1a,")

    with pytest.raises(WebhookVerificationError) as caught:
        verify(SECRET, headers_for() | {"webhook-signature": signature}, BODY, now_s=NOW)
    assert caught.value.problem == "bad-signature"


def test_verification_errors_belong_to_siding_and_are_not_retriable() -> None:
    assert issubclass(WebhookVerificationError, SidingError)
    assert WebhookVerificationError.retriable is False


# --- tampering with anything signed fails ---


@given(body=st.binary(min_size=1, max_size=256), data=st.data())
def test_tampering_any_body_byte_fails(body: bytes, data: st.DataObject) -> None:
    headers = headers_for(body=body)
    index = data.draw(st.integers(0, len(body) - 1))
    flip = data.draw(st.integers(1, 255))
    tampered = body[:index] + bytes([body[index] ^ flip]) + body[index + 1 :]

    with pytest.raises(WebhookVerificationError, match="signature"):
        verify(SECRET, headers, tampered, now_s=NOW)


@given(data=st.data())
def test_tampering_any_id_character_fails(data: st.DataObject) -> None:
    msg_id = data.draw(st.from_regex(r"[a-z0-9._-]{1,20}/[0-9]{1,3}/[0-9]{1,12}", fullmatch=True))
    headers = headers_for(msg_id=msg_id)
    index = data.draw(st.integers(0, len(msg_id) - 1))
    replacement = data.draw(st.characters(min_codepoint=33, max_codepoint=126))
    tampered = msg_id[:index] + replacement + msg_id[index + 1 :]
    assume(tampered != msg_id)

    with pytest.raises(WebhookVerificationError, match="signature"):
        verify(SECRET, headers | {"webhook-id": tampered}, BODY, now_s=NOW)


@given(shift=st.integers(-300, 300).filter(bool))
def test_tampering_the_timestamp_fails(shift: int) -> None:
    headers = headers_for() | {"webhook-timestamp": str(NOW + shift)}

    with pytest.raises(WebhookVerificationError, match="signature"):
        verify(SECRET, headers, BODY, now_s=NOW)


# --- secrets ---


def test_a_whsec_secret_is_base64_decoded_and_a_plain_one_used_as_is() -> None:
    assert secret_key(SECRET) == KEY
    assert secret_key(SECRET.rstrip("=")) == KEY
    assert secret_key("plain") == b"plain"


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not base64!", "whsec_A"])
def test_an_unusable_secret_is_a_config_error_that_does_not_echo_it(secret: str) -> None:
    with pytest.raises(ConfigError) as caught:
        secret_key(secret)
    assert caught.value.key == "secret"
    if secret.removeprefix("whsec_"):
        assert secret.removeprefix("whsec_") not in str(caught.value)
