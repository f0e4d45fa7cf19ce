"""The committed generated code matches proto/ (``make proto`` was run after the last edit)."""

from __future__ import annotations

from pathlib import Path

from siding.devkit import protogen
from siding.v1 import consumer_pb2, consumer_pb2_grpc

COMMITTED = protogen.OUT_DIR / "siding" / "v1"


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    # Given the .proto; when compiled afresh; then each generated file equals the committed one.
    fresh = protogen.generate(protogen.PROTO_DIR, tmp_path)
    names = sorted(p.name for p in fresh)
    assert names == sorted(p.name for p in COMMITTED.iterdir() if p.is_file())
    assert {"consumer_pb2.py", "consumer_pb2.pyi", "consumer_pb2_grpc.py"} <= set(names)
    stale = [p.name for p in fresh if p.read_bytes() != (COMMITTED / p.name).read_bytes()]
    assert stale == [], f"generated code is stale, run `make proto`: {stale}"


def test_the_contract_has_its_calls_and_optional_key_and_value() -> None:
    methods = {m.name: m for m in consumer_pb2.DESCRIPTOR.services_by_name["Consumer"].methods}
    assert set(methods) == {"Deliver", "DeliverStream", "DeliverBatches"}
    for name in ("DeliverStream", "DeliverBatches"):
        assert methods[name].client_streaming
        assert methods[name].server_streaming
    assert methods["DeliverBatches"].input_type.name == "DeliveryBatch"
    assert methods["DeliverBatches"].output_type.name == "ResultBatch"
    assert hasattr(consumer_pb2_grpc, "ConsumerStub")
    # Presence is tracked, so "no key" and "empty key" (and tombstones) stay distinct.
    message = consumer_pb2.Delivery()
    assert not message.HasField("key")
    assert not message.HasField("value")
    message.key = b""
    assert message.HasField("key")
