"""The committed generated code (Python in the thin SDK, Go in the Go SDK) matches proto/
(``make proto`` was run after the last edit), and the proxy shares the SDK's copy."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from siding.devkit import protogen
from siding.v1 import consumer_pb2, consumer_pb2_grpc

COMMITTED = protogen.OUT_DIR / protogen.PYTHON_PACKAGE
COMMITTED_GO = protogen.GO_OUT_DIR / "sidingv1"


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    # Given the .proto; when compiled afresh; then each generated file equals the committed one.
    fresh = protogen.generate(protogen.PROTO_DIR, tmp_path)
    names = sorted(p.name for p in fresh)
    assert names == sorted(p.name for p in COMMITTED.iterdir() if p.is_file())
    assert {"consumer_pb2.py", "consumer_pb2.pyi", "consumer_pb2_grpc.py"} <= set(names)
    stale = [p.name for p in fresh if p.read_bytes() != (COMMITTED / p.name).read_bytes()]
    assert stale == [], f"generated code is stale, run `make proto`: {stale}"


def test_generated_go_code_matches_the_proto(tmp_path: Path) -> None:
    if not (protogen.GO_TOOLS / "protoc-gen-go").exists() and os.environ.get("CI") != "true":
        pytest.skip("the Go protoc plugins are not installed: run `make setup`")
    fresh = protogen.generate_go(protogen.PROTO_DIR, tmp_path)
    assert sorted(p.name for p in fresh) == ["consumer.pb.go", "consumer_grpc.pb.go"]
    assert sorted(p.name for p in fresh) == sorted(p.name for p in COMMITTED_GO.glob("*.pb.go"))
    stale = [p.name for p in fresh if p.read_bytes() != (COMMITTED_GO / p.name).read_bytes()]
    assert stale == [], f"generated Go code is stale, run `make proto`: {stale}"


def test_the_proxy_and_the_sdk_share_one_generated_module() -> None:
    from siding_consumer.v1 import consumer_pb2 as sdk_pb2

    by_path = importlib.import_module("siding.v1.consumer_pb2")
    assert consumer_pb2 is sdk_pb2 is by_path


def test_the_contract_has_its_calls_and_optional_key_and_value() -> None:
    methods = {m.name: m for m in consumer_pb2.DESCRIPTOR.services_by_name["Consumer"].methods}
    assert set(methods) == {"Deliver", "DeliverStream", "DeliverBatches"}
    for name in ("DeliverStream", "DeliverBatches"):
        assert methods[name].client_streaming
        assert methods[name].server_streaming
    assert methods["DeliverBatches"].input_type.name == "DeliveryBatch"
    assert consumer_pb2.DESCRIPTOR.package == "siding.v1"
    assert hasattr(consumer_pb2_grpc, "ConsumerStub")
    # Presence is tracked, so "no key" and "empty key" (and tombstones) stay distinct.
    message = consumer_pb2.Delivery()
    assert not message.HasField("key")
    assert not message.HasField("value")
    message.key = b""
    assert message.HasField("key")
