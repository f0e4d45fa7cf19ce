"""The one spec a route's endpoint gets, built from its config, for every gRPC or HTTP transport."""

from __future__ import annotations

from pathlib import Path

from siding.config import load_config, parse_config
from siding.transport.factory import channel_spec, make_transport, webhook_spec
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.http import DEFAULT_MAX_RESPONSE_BYTES
from siding.transport.http_batch import DEFAULT_MAX_ANSWER_BYTES, HttpBatchTransport
from siding.transport.tls import ClientTls
from tests.unit.test_config import BASE, PEM_CERT


def test_a_grpc_route_gets_its_token_send_limit_and_target() -> None:
    text = BASE.replace("grpc://", "grpc+dns:///") + "max_message_bytes = 65536\n"
    route = parse_config(text + '[route.auth]\ntoken = "tok"\n', env={}).route[0]

    spec = channel_spec(route, route.endpoint[0])

    assert (spec.target, spec.tls, spec.token) == ("dns:///127.0.0.1:50051", False, "tok")
    assert spec.options == (("grpc.max_send_message_length", 65536),)
    assert spec.client_tls is None
    assert "tok" not in repr(spec)


def test_a_plain_grpc_route_has_no_token_and_the_default_send_limit() -> None:
    route = parse_config(BASE, env={}).route[0]

    spec = channel_spec(route, route.endpoint[0])

    assert (spec.target, spec.token, spec.client_tls) == ("127.0.0.1:50051", None, None)
    assert spec.options == (("grpc.max_send_message_length", route.message_limit),)


def test_a_tls_endpoint_carries_the_routes_ca(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text(PEM_CERT)
    auth = '[route.auth]\nca_file = "ca.pem"\n'
    (tmp_path / "siding.toml").write_text(BASE.replace("grpc://", "grpcs://") + auth)
    route = load_config(tmp_path / "siding.toml", env={}).route[0]

    spec = channel_spec(route, route.endpoint[0])

    assert (spec.tls, spec.client_tls) == (True, ClientTls(PEM_CERT.encode()))


def test_a_webhook_route_gets_its_secret_token_source_and_connections() -> None:
    text = BASE.replace("grpc://127.0.0.1:50051", "http://127.0.0.1:8080/hook")
    text += '[route.auth]\ntoken = "tok"\nwebhook_secret = "whsec_c2VjcmV0"\n'
    route = parse_config(text, env={}).route[0]

    spec = webhook_spec(route, route.endpoint[0], 7)

    assert (spec.url, spec.secret, spec.bearer_token) == (
        "http://127.0.0.1:8080/hook",
        "whsec_c2VjcmV0",
        "tok",
    )
    assert (spec.source, spec.max_connections, spec.client_tls) == ("kafka://{topic}", 7, None)
    for secret in ("whsec_c2VjcmV0", "tok"):
        assert secret not in repr(spec)


def test_each_http_transport_reads_its_own_default_length_of_answer() -> None:
    text = BASE.replace("grpc://127.0.0.1:50051", "http://127.0.0.1:8080/hook")
    single = parse_config(text + "batch = false\n", env={}).route[0]
    batched = parse_config(text + "batch = {}\n", env={}).route[0]
    offered = parse_config(text, env={}).route[0]

    one, many, maybe = (make_transport(r, r.endpoint[0], 10) for r in (single, batched, offered))

    assert isinstance(many, HttpBatchTransport) and isinstance(maybe, HttpBatchTransport)
    assert one._max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES  # type: ignore[attr-defined]
    assert many._max_response_bytes == maybe._max_response_bytes == DEFAULT_MAX_ANSWER_BYTES
    # a single webhook's refusal is read for its excerpt only, whichever transport sends it
    assert one._max_excerpt_bytes == maybe._max_excerpt_bytes == DEFAULT_MAX_RESPONSE_BYTES  # type: ignore[attr-defined]


def test_a_batched_grpc_route_keeps_its_limits_and_spec() -> None:
    text = BASE + 'batch = { max = 8, linger = "10ms" }\n[route.auth]\ntoken = "tok"\n'
    route = parse_config(text, env={}).route[0]

    transport = make_transport(route, route.endpoint[0], 10)

    assert isinstance(transport, GrpcBatchTransport)
    assert (transport.limits.max_items, transport.target) == (8, "127.0.0.1:50051")
