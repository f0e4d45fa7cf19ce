"""The test collector's pure parts: its configuration and the spans of its exported bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping

from siding.devkit.otel_collector import collector_config, flat_spans


def test_the_collector_receives_otlp_grpc_and_exports_json_to_the_sink_as_it_comes() -> None:
    config = json.loads(collector_config(4317, "http://127.0.0.1:9/v1/traces"))
    assert config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "127.0.0.1:4317"
    exporter = config["exporters"]["otlphttp"]
    assert exporter["traces_endpoint"] == "http://127.0.0.1:9/v1/traces"
    assert exporter["encoding"] == "json"
    assert exporter["sending_queue"] == {"enabled": False}
    assert exporter["retry_on_failure"] == {"enabled": False}
    assert config["service"]["pipelines"] == {
        "traces": {"receivers": ["otlp"], "exporters": ["otlphttp"]}
    }


def _body(service: str, *spans: Mapping[str, object]) -> str:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]}
    scope_spans = [{"scope": {"name": "siding"}, "spans": list(spans)}]
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": scope_spans}]})


def test_flat_spans_takes_every_body_and_gives_each_span_its_service_and_plain_attributes() -> None:
    first = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "deliver orders",
        "kind": 3,
        "attributes": [
            {"key": "messaging.kafka.offset", "value": {"intValue": "7"}},
            {"key": "siding.outcome", "value": {"stringValue": "ack"}},
            {"key": "ok", "value": {"boolValue": True}},
        ],
    }
    second = {"traceId": "1af7651916cd43dd8448eb211c80319d", "spanId": "a", "name": "park p"}
    spans = flat_spans([_body("siding", first), "", _body("other", second)])
    assert [(s["name"], s["service"]) for s in spans] == [
        ("deliver orders", "siding"),
        ("park p", "other"),
    ]
    # intValue is a string in OTLP JSON: the offset comes back as a number
    assert spans[0]["attrs"] == {"messaging.kafka.offset": 7, "siding.outcome": "ack", "ok": True}
    assert spans[1]["attrs"] == {}
