"""The control API's routes and registrations on a real broker (docs/registration.md): token
rules, bad input that changes nothing, leases that lapse, the audit trail, a restart, and
``siding ctl``. The routes' Spark queries are stood in for by a host that records its calls
(tests/e2e/test_registration.py runs the real ones)."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from siding import naming
from siding.cli.ctl import ctl
from siding.cli.registered import with_api_route
from siding.config import RouteConfig, SidingConfig, parse_config
from siding.control import ControlServer
from siding.control.registry import RegistryService
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.wait import wait_until
from siding.kafka.reader import read_to_end
from siding.pipeline.driver.metrics import MetricsSink

ADMIN = "admin-s3cret"
JOIN = "join-s3cret"


class Host:
    """Stands in for the Spark application: which routes it runs."""

    def __init__(self) -> None:
        self.running: dict[str, RouteConfig] = {}
        self.removed: list[str] = []

    def add_route(self, route: RouteConfig) -> None:
        self.running[route.name] = route

    def remove_route(self, name: str, timeout_s: float) -> dict[str, dict[int, int]]:
        assert timeout_s > 0
        self.running.pop(name)
        self.removed.append(name)
        return {"orders": {0: 42}}


def make_config(bootstrap: str, registry_topic: str, fixed_topic: str) -> SidingConfig:
    return parse_config(f"""
[kafka]
bootstrap = "{bootstrap}"
[control]
listen = "127.0.0.1:0"
token = "{ADMIN}"
registry_topic = "{registry_topic}"
[[route]]
name = "fixed"
topic = "{fixed_topic}"
group = "g"
endpoint = "grpc://127.0.0.1:1"
""")


class Api:
    def __init__(self, config: SidingConfig, host: Host, name: str) -> None:
        self.name = name  # of the route this test makes (audit topics outlive a test)
        self.config = config
        self.host = host
        self.registry = RegistryService(config, reap_s=0.1)
        self.api_routes = self.registry.open()
        host.running.update({route.name: route for route in self.api_routes})  # as siding run does
        self.registry.attach(host)
        self.registry.start()
        self.server = ControlServer(
            ("127.0.0.1", 0), MetricsSink(), list, token=ADMIN, registry=self.registry
        ).start()

    def call(
        self, method: str, path: str, token: str | None = None, body: object = None
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.server.url}{path}", data=data, method=method)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def registry_conf(self) -> dict[str, object]:
        return dict(self.config.kafka.client_config())

    def close(self) -> None:
        self.server.stop()
        self.registry.stop()


@pytest.fixture
def api(kafka: EmbeddedKafka, topic_name: Callable[[str], str]) -> Iterator[Callable[[], Api]]:
    registry_topic, fixed, name = topic_name("registry"), topic_name("fixed"), topic_name("r")
    opened: list[Api] = []

    def start() -> Api:
        opened.append(Api(make_config(kafka.bootstrap, registry_topic, fixed), Host(), name))
        return opened[-1]

    yield start
    for one in opened:
        one.close()


def orders(a: Api, topic: str = "orders-src", **more: object) -> dict[str, object]:
    return {"name": a.name, "topic": topic, "group": "fulfilment", "lease": "1s",
            "registration_token": JOIN, **more}  # fmt: skip


def test_routes_made_through_the_api_need_the_admin_token_and_good_input(
    api: Callable[[], Api], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a = api()
    before = a.call("GET", "/routes")
    # Without a token, with a wrong one, with a registration token: refused
    assert a.call("POST", "/routes", None, orders(a))[0] == 401
    assert a.call("POST", "/routes", "wrong", orders(a))[0] == 403
    # Bad input: 400 naming the key, and nothing changes
    bad = [
        (
            orders(a, deadlin="1s"),
            f"route[{a.name}].deadlin: unknown key (did you mean 'deadline'?)",
        ),
        (orders(a, deadline="5"), f"route[{a.name}].deadline: '5' has no unit"),
        ({**orders(a), "name": "fixed"}, "route[fixed].name: another route is named 'fixed'"),
        ([1], "the body must be a JSON object"),
    ]
    for body, error in bad:
        code, answer = a.call("POST", "/routes", ADMIN, body)
        assert code == 400, answer
        assert str(answer["error"]).startswith(error)
    assert a.call("GET", "/routes") == before
    assert a.host.running == {}
    kept = read_to_end(a.registry_conf(), a.config.control.registry_topic)
    assert [key for key, _ in kept if key != b"driver/alive"] == []
    # Good input with the admin token: made, listed with its origin, secrets hidden
    code, made = a.call("POST", "/routes", ADMIN, orders(a))
    assert code == 201 and made["origin"] == "api" and set(a.host.running) == {a.name}
    listed = a.call("GET", "/routes")[1]["routes"]
    assert [(r["name"], r["origin"]) for r in listed] == [("fixed", "config"), (a.name, "api")]
    assert JOIN not in json.dumps(listed) and ADMIN not in json.dumps(listed)
    # The DLQ tools find it while it exists
    assert [r.name for r in with_api_route(a.config, a.name).route] == ["fixed", a.name]
    # A name that exists now is refused, and a config route cannot be deleted here
    assert a.call("POST", "/routes", ADMIN, orders(a, topic="other"))[0] == 400
    assert a.call("DELETE", "/routes/fixed", ADMIN)[0] == 409
    assert a.call("DELETE", "/routes/nope", ADMIN)[0] == 404
    assert JOIN not in caplog.text and ADMIN not in caplog.text


def test_instances_join_renew_leave_and_lapse_with_an_audit_trail(
    api: Callable[[], Api], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="siding.registry")
    a = api()
    assert a.call("POST", "/routes", ADMIN, orders(a))[0] == 201
    join = {"address": "127.0.0.1:50061", "capacity": 10}
    path = f"/routes/{a.name}/consumers"
    # Token rules: none 401; a route that does not exist 404; wrong 403; no registrations 409
    assert a.call("POST", path, None, join)[0] == 401
    assert a.call("POST", "/routes/nope/consumers", JOIN, join)[0] == 404
    assert a.call("POST", path, "wrong", join)[0] == 403
    assert a.call("POST", "/routes/fixed/consumers", ADMIN, join)[0] == 409
    code, answer = a.call("POST", path, JOIN, {"address": "127.0.0.1:50061", "port": 1})
    assert (code, answer["error"]) == (
        400,
        "port: unknown key (known: address, transport, capacity)",
    )
    # Joined with the route's token, and again (same address) with the admin token: one lease
    code, lease = a.call("POST", path, JOIN, join)
    assert code == 201 and lease["address"] == "grpc://127.0.0.1:50061" and lease["lease_s"] == 1.0
    code, again = a.call("POST", path, ADMIN, join)
    assert code == 200 and again["consumer"] == lease["consumer"]
    other = a.call("POST", path, JOIN, {"address": "127.0.0.1:8080/in", "transport": "http"})[1]
    listed = a.call("GET", path)[1]["consumers"]
    assert [c["consumer"] for c in listed] == [lease["consumer"], other["consumer"]]
    # Renewing holds the lease; leaving ends it; a renewal after that is told to join again
    mine = f"{path}/{lease['consumer']}"
    for _ in range(4):
        time.sleep(0.4)
        assert a.call("PUT", mine, JOIN)[0] == 200
    assert a.call("DELETE", mine, JOIN)[0] == 200
    assert a.call("PUT", mine, JOIN)[0] == 404
    # The other one, never renewed, lapsed and was dropped
    wait_until(lambda: a.call("GET", path)[1]["consumers"] == [], timeout_s=10, what="a lapse")
    assert "lease lapsed" in caplog.text
    # Every change is an audit event in the DLQ tools' form, on the route's audit topic
    audit = naming.state_topic(a.name, "audit")
    events = [json.loads(v or b"") for _, v in read_to_end(a.registry_conf(), audit)]
    assert [e["command"] for e in events[:3]] == ["route create", "consumer join", "consumer join"]
    assert sorted(e["command"] for e in events[3:]) == ["consumer expire", "consumer leave"]
    assert events[1]["who"].startswith("registration@127.0.0.1")
    assert {"at", "at_ms", "who", "route", "dlq", "filter", "count", "status"} <= set(events[1])
    assert events[1]["dlq"] == f"siding.{a.name}.dlq" and events[1]["consumer"] == lease["consumer"]
    assert JOIN not in json.dumps(events) and JOIN not in caplog.text


def test_after_a_restart_api_routes_and_held_leases_come_back(api: Callable[[], Api]) -> None:
    # Leases do not run while siding is down: an instance cannot renew then.
    first = api()
    path = f"/routes/{first.name}"
    assert first.call("POST", "/routes", ADMIN, orders(first, lease="3s"))[0] == 201
    lease = first.call("POST", f"{path}/consumers", JOIN, {"address": "h:1"})[1]
    first.close()
    # When siding is down for longer than the lease, then reads the registry again
    time.sleep(4)
    second = api()
    assert [r.name for r in second.api_routes] == [first.name]
    listed = second.call("GET", f"{path}/consumers")[1]["consumers"]
    assert [c["consumer"] for c in listed] == [lease["consumer"]]
    # And deleting it stops it and forgets it and its instances, durably
    code, deleted = second.call("DELETE", path, ADMIN)
    assert code == 200 and deleted["committed"] == {"orders": {"0": 42}}
    assert second.host.removed == [first.name]
    assert second.call("POST", f"{path}/consumers", JOIN, {"address": "h:1"})[0] == 404
    second.close()
    third = api()
    assert third.api_routes == [] and third.call("GET", f"{path}/consumers")[0] == 404


def test_siding_ctl_makes_the_same_calls(api: Callable[[], Api], tmp_path: Path) -> None:
    a = api()
    route = tmp_path / "orders.toml"
    route.write_text(
        f'[[route]]\nname = "{a.name}"\ntopic = "orders-src"\ngroup = "fulfilment"\n'
        'registration_token = "${ORDERS_TOKEN}"\n'
    )
    runner = CliRunner()
    base = ["--url", a.server.url, "--token", ADMIN]
    made = runner.invoke(
        ctl, [*base, "routes", "add", "-f", str(route)], env={"ORDERS_TOKEN": JOIN}
    )
    assert made.exit_code == 0, made.output
    assert a.host.running[a.name].registration_token.get_secret_value() == JOIN  # type: ignore[union-attr]
    listed = runner.invoke(ctl, [*base, "routes", "list"])
    assert '"origin": "api"' in listed.output and JOIN not in listed.output
    a.call("POST", f"/routes/{a.name}/consumers", JOIN, {"address": "h:1"})
    shown = runner.invoke(ctl, [*base, "consumers", a.name])
    assert '"address": "grpc://h:1"' in shown.output
    refused = runner.invoke(ctl, ["--url", a.server.url, "routes", "delete", a.name])
    assert refused.exit_code != 0 and "HTTP 401" in refused.output
    deleted = runner.invoke(ctl, [*base, "routes", "delete", a.name])
    assert deleted.exit_code == 0 and f'"deleted": "{a.name}"' in deleted.output
