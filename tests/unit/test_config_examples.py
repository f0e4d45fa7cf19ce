"""The example files load, use every key, and every key is documented in docs/configuration.md."""

from __future__ import annotations

import re
import shutil
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from siding import naming
from siding.config import Endpoint, SidingConfig, load_config
from siding.errors import ConfigError
from siding.model import Lane, Ordering

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "configuration.md"
PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def model_keys(model: type[BaseModel] = SidingConfig, prefix: str = "") -> Iterator[str]:
    """Every key a siding.toml can hold, written as the docs write it: ``route.lanes[].delay``."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        inner, is_list = _unwrap(field.annotation)
        if key == "kafka.client":  # the pass-through settings
            yield "kafka.<property>"
        elif key in ("kafka.librdkafka", "kafka.java"):  # one client's settings
            yield f"{key}.<property>"
        elif key == "kafka.clusters":  # more clusters, each as [kafka] is
            yield "kafka.clusters.<name>"
        elif inner is None or inner is Endpoint:
            yield key
        elif key == "route":  # [[route]] tables
            yield from model_keys(inner, "route.")
        elif is_list:  # inline tables in a list
            yield key
            yield from model_keys(inner, f"{key}[].")
        else:
            yield from model_keys(inner, f"{key}.")


def _unwrap(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is tuple:
        inner, _ = _unwrap(typing.get_args(annotation)[0])
        return inner, True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # an optional table
        tables = [_unwrap(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(tables) == 1 and tables[0][0] is not None:
            return tables[0]
    return None, False


def file_keys(table: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every key a parsed TOML file uses, in the same notation."""
    for name, value in table.items():
        key = f"{prefix}{name}"
        if prefix == "kafka." and name == "clusters":
            yield "kafka.clusters.<name>"
        elif prefix == "kafka." and name in ("librdkafka", "java"):
            yield f"{key}.<property>"
        elif prefix == "kafka." and name != "bootstrap":
            yield "kafka.<property>"
        elif key in ("spark.conf", "route.http.headers"):  # tables of the user's own names
            yield key
        elif key == "route":
            for route in value:
                yield from file_keys(route, "route.")
        elif isinstance(value, Mapping):
            yield from file_keys(value, f"{key}.")
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            yield key
            for item in value:
                yield from file_keys(item, f"{key}[].")
        else:
            yield key


def documented_keys() -> set[str]:
    return set(re.findall(r"^\| `([a-z_.<>\[\]]+)` \|", DOC.read_text(), flags=re.M))


def all_keys() -> set[str]:
    return set(model_keys())


def test_every_key_is_documented_and_every_documented_key_exists() -> None:
    assert documented_keys() == all_keys()


def test_the_full_example_uses_every_key() -> None:
    used = set(file_keys(tomllib.loads((EXAMPLES / "siding.toml").read_text())))
    assert all_keys() - used == set()
    assert used - all_keys() == set()


def test_the_full_example_loads(tmp_path: Path) -> None:
    # Given the example next to the secret files it names
    shutil.copy(EXAMPLES / "siding.toml", tmp_path / "siding.toml")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "billing.token").write_text("billing-token\n")
    (secrets / "ca.pem").write_text(PEM_CERT)
    (secrets / "siding.crt").write_text(PEM_CERT)
    (secrets / "siding.key").write_text(PEM_KEY)
    (secrets / "audit.whsec").write_text("whsec_YXVkaXQtc2VjcmV0\n")
    (secrets / "audit-page.whsec").write_text("audit-page-secret\n")
    env = {
        "RECEIPTS_TOKEN": "receipts-token",
        "RECEIPTS_WEBHOOK_SECRET": "whsec_cmVjZWlwdHM=",
        "RECEIPTS_CA_PEM": PEM_CERT,
        "RECEIPTS_CERT_PEM": PEM_CERT,
        "RECEIPTS_KEY_PEM": PEM_KEY,
        "ORDERS_JOIN_TOKEN": "orders-join-token",
        "AUDIT_API_KEY": "audit-key",
        "BILLING_PAGE_SECRET": "whsec_YmlsbGluZy1wYWdl",
    }
    # When it is loaded
    config = load_config(tmp_path / "siding.toml", env=env)
    # Then every route is there, with the values the comments promise
    assert [r.name for r in config.routes] == [
        "billing",
        "trips.receipts",
        "audit",
        "orders",
        "refunds",
        "shipments",
        "trips-hot",
    ]
    assert config.route_named("refunds").subscription == ("subscribe", "refunds-eu,refunds-us")
    assert config.route_named("trips-hot").subscription == ("assign", '{"trips": [5]}')
    shipments = config.route_named("shipments")
    assert shipments.reads("shipments-2") and not shipments.reads("siding.shipments-x.dlq")
    orders = config.route_named("orders")
    assert orders.endpoint == () and orders.takes_registrations and orders.lease == 15.0
    billing = config.route_named("billing")
    assert billing.ordering is Ordering.KEY
    assert billing.lanes_as_model() == (Lane(10.0, 30.0, 1), Lane(300.0, 120.0, 2))
    assert naming.route_dlq(billing) == "trips.billing.dlq"
    audit = config.route_named("audit")
    assert naming.route_dlq(audit) == "siding.audit.dlq"
    assert audit.http.method == "PUT" and audit.http.header_values() == (
        ("X-Api-Key", "audit-key"),
    )
    assert billing.dlq_page is not None and billing.dlq_page.every == 60.0
    audit_page = config.route_named("audit").dlq_page
    assert audit_page is not None and audit_page.secret.get_secret_value() == "audit-page-secret"
    assert config.kafka.client_config()["bootstrap.servers"] == "127.0.0.1:9092"
    assert config.kafka.notes == ()  # every [kafka] setting reaches the clients it is for
    assert config.spark.checkpoint_dir == str(tmp_path / ".siding" / "checkpoints")


def test_the_quickstart_loads_with_its_three_variables() -> None:
    env = {
        "SIDING_BOOTSTRAP": "127.0.0.1:39092",
        "SIDING_TOPIC": "orders",
        "SIDING_ENDPOINT": "grpc://127.0.0.1:50051",
    }
    config = load_config(EXAMPLES / "quickstart.toml", env=env)
    (route,) = config.routes
    assert config.kafka.bootstrap == "127.0.0.1:39092"
    assert (route.name, route.topic, route.group) == ("quickstart", "orders", "quickstart")
    assert route.endpoint[0].grpc_target == "127.0.0.1:50051"
    assert route.ordering is Ordering.UNORDERED
    assert route.max_in_flight == 200
    assert route.lanes_as_model() == (Lane(2.0, 10.0, 1), Lane(10.0, 30.0, 1))
    assert naming.route_lane_topics(route) == (
        "siding.quickstart.retry-1",
        "siding.quickstart.retry-2",
    )
    assert naming.route_dlq(route) == "siding.quickstart.dlq"


@pytest.mark.parametrize("missing", ["SIDING_BOOTSTRAP", "SIDING_TOPIC", "SIDING_ENDPOINT"])
def test_the_quickstart_names_a_missing_variable(missing: str) -> None:
    env = {"SIDING_BOOTSTRAP": "a:1", "SIDING_TOPIC": "t", "SIDING_ENDPOINT": "http://h/x"}
    del env[missing]
    with pytest.raises(ConfigError, match=f"{missing} is not set"):
        load_config(EXAMPLES / "quickstart.toml", env=env)
