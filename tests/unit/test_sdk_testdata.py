"""The shared test vectors in sdk/testdata, which the Node and Java SDK tests read, stay what
siding itself produces: signatures from its signer, batch envelopes from its encoder, join
requests its registry reads."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from siding.model import Delivery
from siding.registry.join import join_request
from siding.transport.batch_envelope import envelope
from siding.transport.signing import sign

TESTDATA = Path(__file__).resolve().parents[2] / "sdk" / "testdata"


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _delivery(d: dict[str, Any]) -> Delivery:
    return Delivery(
        id=d["id"],
        topic=d["topic"],
        partition=d["partition"],
        offset=d["offset"],
        key=_bytes(d["key_base64"]),
        value=_bytes(d["value_base64"]),
        headers=tuple((h["key"], base64.b64decode(h["value_base64"])) for h in d["headers"]),
        timestamp_ms=d["timestamp_ms"],
        attempt=d["attempt"],
        lane=d["lane"],
    )


def test_every_signature_vector_is_sidings_own() -> None:
    cases = json.loads((TESTDATA / "webhook-signatures.json").read_text())["cases"]
    assert len(cases) >= 4
    for case in cases:
        body = base64.b64decode(case["body_base64"])
        assert sign(case["secret"], case["id"], case["timestamp"], body) == case["signature"]


def test_the_batch_envelope_vector_is_what_siding_sends_for_its_deliveries() -> None:
    vector = json.loads((TESTDATA / "batch-envelope.json").read_text())
    deliveries = [_delivery(d) for d in vector["deliveries"]]
    # tombstone, empty value, null key, empty key, binary and repeated headers, no timestamp
    assert any(d.value is None for d in deliveries)
    assert any(d.value == b"" for d in deliveries)
    assert any(d.key is None for d in deliveries) and any(d.key == b"" for d in deliveries)
    assert any(d.timestamp_ms == 0 for d in deliveries)
    assert envelope(deliveries).decode() == vector["body"]


def test_the_join_request_vectors_are_what_siding_reads() -> None:
    cases = json.loads((TESTDATA / "join-requests.json").read_text())["cases"]
    assert {c["transport"] for c in cases} >= {None, "http", "grpcs"}
    for case in cases:
        request = join_request(case["body"])
        assert request.endpoint.url == case["siding_reads"]["endpoint"]
        assert request.capacity == case["siding_reads"]["capacity"]
