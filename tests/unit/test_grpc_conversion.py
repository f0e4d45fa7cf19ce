"""The contract's messages and siding's model convert both ways without losing anything."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.errors import ConfigError
from siding.model import Delivery, Output, Result, Verdict
from siding.transport.grpc_common import (
    ChannelSpec,
    call_metadata,
    delivery_from_proto,
    delivery_to_proto,
    merge_options,
    result_from_proto,
    result_to_proto,
)
from siding.v1 import consumer_pb2

int32 = st.integers(min_value=0, max_value=2**31 - 1)
deliveries = st.builds(
    Delivery,
    id=st.text(),
    topic=st.text(),
    partition=int32,
    offset=st.integers(min_value=0, max_value=2**63 - 1),
    key=st.none() | st.binary(),
    value=st.none() | st.binary(),
    headers=st.lists(st.tuples(st.text(), st.binary())).map(tuple),
    timestamp_ms=st.integers(min_value=0, max_value=2**62),
    attempt=int32,
    lane=int32,
)
results = st.builds(
    Result,
    delivery_id=st.text(),
    verdict=st.sampled_from(Verdict),
    retry_after_s=st.none() | st.floats(min_value=0, max_value=1e9),
    reason=st.text(),
)


@given(deliveries)
def test_a_delivery_survives_the_wire(delivery: Delivery) -> None:
    wire = consumer_pb2.Delivery.FromString(delivery_to_proto(delivery).SerializeToString())
    assert delivery_from_proto(wire) == delivery


@given(results)
def test_a_result_survives_the_wire(result: Result) -> None:
    wire = consumer_pb2.Result.FromString(result_to_proto(result).SerializeToString())
    assert result_from_proto(wire) == result


def test_null_key_and_tombstone_differ_from_empty_bytes() -> None:
    empty = Delivery("t/0/1", "t", 0, 1, key=b"", value=b"")
    null = Delivery("t/0/1", "t", 0, 1, key=None, value=None)
    assert delivery_from_proto(delivery_to_proto(empty)) == empty
    assert delivery_from_proto(delivery_to_proto(null)) == null


def test_zero_retry_after_is_not_absent() -> None:
    result = Result("x", Verdict.RETRY, retry_after_s=0.0)
    assert result_from_proto(result_to_proto(result)).retry_after_s == 0.0


@pytest.mark.parametrize("verdict", [consumer_pb2.VERDICT_UNSPECIFIED, 42])
def test_a_result_without_a_known_verdict_is_a_retry(verdict: int) -> None:
    message = consumer_pb2.Result(delivery_id="x")
    message.verdict = verdict  # type: ignore[assignment]
    result = result_from_proto(message)
    assert result.verdict is Verdict.RETRY
    assert "without a verdict" in result.reason


def test_bearer_token_metadata() -> None:
    assert call_metadata("s3cret") == (("authorization", "Bearer s3cret"),)
    assert call_metadata(None) == ()


def test_channel_options_override_defaults_by_name() -> None:
    merged = dict(merge_options([("a", 1), ("b", 2)], [("b", 3), ("c", 4)]))
    assert merged == {"a": 1, "b": 3, "c": 4}


def test_a_ca_file_without_tls_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as error:
        ChannelSpec("localhost:1", tls=False, ca_file="/ca.pem")
    assert error.value.key == "ca_file"


def test_an_ack_carries_its_outputs_exactly() -> None:
    # Given a consumer that acks and asks siding to produce two records, binary and absent
    message = consumer_pb2.Result(
        delivery_id="t/0/1",
        verdict=consumer_pb2.VERDICT_ACK,
        outputs=[
            consumer_pb2.Output(
                topic="orders.billed",
                key=bytes(range(256)),
                value=b"\x00",
                headers=[consumer_pb2.Header(key="h", value=b"\xff")],
            ),
            consumer_pb2.Output(topic="orders.audit"),  # no key, a tombstone
        ],
    )
    # Then the model's result is the ack with both outputs, absent fields kept absent
    result = result_from_proto(message)
    assert result.verdict is Verdict.ACK
    assert result.outputs == (
        Output("orders.billed", bytes(range(256)), b"\x00", (("h", b"\xff"),)),
        Output("orders.audit", None, None, ()),
    )
