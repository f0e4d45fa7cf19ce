"""Runtime control (issue 12): pause/resume, breaker close, limits within bounds, and the bearer
token rules of the control API's mutating calls; ``siding ctl`` against a real server."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from siding.cli.ctl import ctl
from siding.cli.top import top
from siding.config import parse_config
from siding.control import ControlServer
from siding.control.tokens import check_token
from siding.dispatch.breaker import (
    BreakerSettings,
    BreakerState,
    BreakerStatus,
    ForcedClose,
    transition,
)
from siding.pipeline.driver.controls import ControlError, RouteControls
from siding.pipeline.driver.metrics import MetricsSink

CONFIG = """
[kafka]
bootstrap = "localhost:9092"
[[route]]
name = "billing"
topic = "trips"
group = "billing"
endpoint = "grpc://localhost:50051"
max_in_flight = 500
rate_limit = 200
adaptive = { min_in_flight = 10 }
"""
TOKEN = "s3cret-token"


def controls() -> RouteControls:
    route = parse_config(CONFIG).route[0]
    return RouteControls({route.name: route})


def test_limits_change_within_the_configured_bounds_only() -> None:
    c = controls()
    route = parse_config(CONFIG).route[0]
    assert c.change("billing", {"max_in_flight": 50, "rate_limit": 20})["max_in_flight"] == 50
    effective = c.effective(route)
    assert (effective.max_in_flight, effective.rate_limit) == (50, 20.0)
    for bad in ({"max_in_flight": 501}, {"max_in_flight": 9}, {"rate_limit": 201}, {"x": 1}):
        with pytest.raises(ControlError) as raised:
            c.change("billing", bad)
        assert raised.value.status == 400
    with pytest.raises(ControlError) as missing:
        c.pause("nope")
    assert missing.value.status == 404


def test_pause_holds_a_batch_until_resume() -> None:
    c = controls()
    c.pause("billing")
    released = threading.Event()

    def batch() -> None:
        c.wait_while_paused("billing", threading.Event(), poll_s=0.01)
        released.set()

    worker = threading.Thread(target=batch)
    worker.start()
    time.sleep(0.2)
    assert not released.is_set()
    c.resume("billing")
    worker.join(2)
    assert released.is_set()


def test_closing_the_breaker_bumps_the_epoch_and_the_breaker_closes_from_any_state() -> None:
    c = controls()
    assert c.close_breaker("billing") == 1 and c.breaker_epoch("billing") == 1
    settings = BreakerSettings()
    opened = BreakerStatus(BreakerState.OPEN, 0, 8.0, 99.0)
    assert transition(opened, ForcedClose(), 1.0, settings) == BreakerStatus()


@pytest.mark.parametrize(
    ("configured", "given", "status"),
    [
        (None, "Bearer x", 403),
        (TOKEN, None, 401),
        (TOKEN, "Basic abc", 401),
        (TOKEN, "Bearer wrong", 403),
        (TOKEN, f"Bearer {TOKEN}", None),
    ],
)
def test_token_rules(configured: str | None, given: str | None, status: int | None) -> None:
    refusal = check_token(configured, given)
    assert (refusal[0] if refusal else None) == status


@pytest.fixture
def server() -> Iterator[tuple[ControlServer, RouteControls]]:
    c = controls()
    metrics = MetricsSink()
    metrics.declare("billing", 1)
    with ControlServer(("127.0.0.1", 0), metrics, list, controls=c, token=TOKEN) as s:
        yield s, c


def call(
    url: str, method: str, token: str | None, body: object = None
) -> tuple[int, dict[str, object]]:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_mutating_calls_over_http(server: tuple[ControlServer, RouteControls]) -> None:
    s, c = server
    base = f"{s.url}/routes/billing"
    assert call(f"{base}/pause", "POST", None)[0] == 401
    assert call(f"{base}/pause", "POST", "wrong")[0] == 403
    assert not c.paused("billing")
    code, body = call(f"{base}/pause", "POST", TOKEN)
    assert code == 200 and body["paused"] is True and c.paused("billing")
    assert call(f"{base}/resume", "POST", TOKEN)[1]["paused"] is False
    assert call(f"{base}/breaker/close", "POST", TOKEN)[1]["breaker_epoch"] == 1
    code, body = call(base, "PATCH", TOKEN, {"max_in_flight": 100})
    assert code == 200 and body["max_in_flight"] == 100
    assert call(base, "PATCH", TOKEN, {"max_in_flight": 10_000})[0] == 400
    assert call(f"{s.url}/routes/nope/pause", "POST", TOKEN)[0] == 404


def test_status_shows_each_routes_control_values(
    server: tuple[ControlServer, RouteControls],
) -> None:
    s, c = server
    c.pause("billing")
    with urllib.request.urlopen(f"{s.url}/status", timeout=5) as response:
        doc = json.loads(response.read())
    (route,) = doc["routes"]
    assert route["control"] == {
        "paused": True,
        "max_in_flight": 500,
        "rate_limit": 200.0,
        "breaker_epoch": 0,
    }


def test_without_a_configured_token_mutating_calls_are_off() -> None:
    with ControlServer(("127.0.0.1", 0), MetricsSink(), list, controls=controls()) as s:
        code, body = call(f"{s.url}/routes/billing/pause", "POST", "anything")
    assert code == 403 and "[control] token" in str(body["error"])


def test_siding_ctl_drives_the_same_calls(server: tuple[ControlServer, RouteControls]) -> None:
    s, c = server
    runner = CliRunner()
    args = ["--url", s.url, "--token", TOKEN]
    assert runner.invoke(ctl, [*args, "pause", "billing"]).exit_code == 0
    assert c.paused("billing")
    assert runner.invoke(ctl, [*args, "set", "billing", "--rate-limit", "50"]).exit_code == 0
    assert c.values("billing")["rate_limit"] == 50.0
    refused = runner.invoke(ctl, ["--url", s.url, "--token", "wrong", "resume", "billing"])
    assert refused.exit_code != 0 and "403" in refused.output
    assert c.paused("billing")


def test_siding_top_shows_a_running_siding_through_its_control_api(
    server: tuple[ControlServer, RouteControls],
) -> None:
    s, c = server
    c.pause("billing")
    result = CliRunner(env={"COLUMNS": "200"}).invoke(top, ["--url", s.url, "--once"])
    assert result.exit_code == 0, result.output
    assert "billing (paused)" in result.output and "main" in result.output
    unreachable = CliRunner().invoke(top, ["--url", "http://127.0.0.1:9", "--once"])
    assert unreachable.exit_code != 0 and "cannot read" in unreachable.output


def test_drain_is_a_mutating_call_with_the_same_token_rules() -> None:
    drained = threading.Event()
    c = controls()
    with ControlServer(
        ("127.0.0.1", 0), MetricsSink(), list, controls=c, token=TOKEN, drain=drained.set
    ) as s:
        assert call(f"{s.url}/drain", "POST", None)[0] == 401
        assert call(f"{s.url}/drain", "POST", "wrong")[0] == 403
        assert call(f"{s.url}/drain", "PATCH", TOKEN)[0] == 405
        assert not drained.is_set()
        runner = CliRunner()
        refused = runner.invoke(ctl, ["--url", s.url, "--token", "wrong", "drain"])
        assert refused.exit_code != 0 and "403" in refused.output and not drained.is_set()
        done = runner.invoke(ctl, ["--url", s.url, "--token", TOKEN, "drain"])
        assert done.exit_code == 0 and '"draining": true' in done.output
    assert drained.is_set()
    with ControlServer(("127.0.0.1", 0), MetricsSink(), list, controls=c) as s:
        assert call(f"{s.url}/drain", "POST", "anything")[0] == 403
