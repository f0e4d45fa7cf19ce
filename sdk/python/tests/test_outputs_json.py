"""Outputs in webhook answers (docs/outputs.md): what the app writes, siding reads back exactly."""

from __future__ import annotations

import pytest

from siding_consumer import Output
from siding_consumer.outputs import OutputError, outputs_from_json, outputs_to_json

ALL_BYTES = bytes(range(256))


def test_outputs_travel_byte_for_byte_through_json() -> None:
    sent = (
        Output("orders.billed", key=ALL_BYTES, value=ALL_BYTES, headers=(("h", b"\x00\xff"),)),
        Output("orders.billed", key=None, value=None),  # no key, a tombstone
        Output("orders.audit", key=b"", value=b""),  # empty, not absent
    )
    assert outputs_from_json(outputs_to_json(sent)) == sent


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"topic": "t"}, "results\\[2\\].outputs is not a list"),
        (["t"], "results\\[2\\].outputs\\[0\\] is not an object"),
        ([{"value_base64": "AA=="}], "outputs\\[0\\].topic is missing"),
        (
            [{"topic": "t", "value_base64": "not base64!"}],
            "outputs\\[0\\].value_base64 is not valid",
        ),
        ([{"topic": "t", "key_base64": 7}], "outputs\\[0\\].key_base64 is not a base64 string"),
        ([{"topic": "t", "headers": {}}], "outputs\\[0\\].headers is not a list"),
        (
            [{"topic": "t", "headers": [{"key": "h"}]}],
            "headers\\[0\\].value_base64 is not a base64",
        ),
    ],
)
def test_a_bad_output_is_named(value: object, message: str) -> None:
    with pytest.raises(OutputError, match=message):
        outputs_from_json(value, "results[2].outputs")
