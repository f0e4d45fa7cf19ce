"""Joining a route, against a real HTTP server on loopback that answers as siding's control API
does (docs/registration.md, "The calls"): join, renew every lease/3, join again on 404, back off
while siding is away, leave on stop, the token in every call and in no log."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from siding_consumer import (
    ConsumerServer,
    Delivery,
    Join,
    Registration,
    RegistrationError,
    RegistrationEvent,
    Reply,
    ack,
)
from siding_consumer.registration import advertised, join_body, renew_every, retry_after

TOKEN = "s3cret-join-token"
ROUTE = "orders"
LEASE_S = 0.3


@dataclass
class Call:
    method: str
    path: str
    authorization: str | None
    body: dict[str, Any] | None


@dataclass
class FakeSiding:
    """The registration calls of siding's control API, kept in memory."""

    lease_s: float = LEASE_S
    calls: list[Call] = field(default_factory=list)
    consumers: dict[str, str] = field(default_factory=dict)  # id -> address
    failing: int | None = None  # answer every call with this status
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, call: Call) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.calls.append(call)
            if self.failing is not None:
                return self.failing, {"error": "siding is busy"}
            if call.authorization is None:
                return 401, {"error": "a bearer token is needed"}
            parts = [p for p in call.path.split("/") if p]
            if parts[:3] != ["routes", ROUTE, "consumers"]:
                return 404, {"error": f"no such route: {parts[1]}"}
            if call.authorization != f"Bearer {TOKEN}":
                return 403, {"error": "wrong token"}
            return self._registry(call, parts[3:])

    def _registry(self, call: Call, rest: list[str]) -> tuple[int, dict[str, Any]]:
        if not rest and call.method == "POST":
            assert call.body is not None
            address = call.body["address"]
            if ":" not in address:
                return 400, {"error": f"address: {address!r} has no port"}
            known = [c for c, a in self.consumers.items() if a == address]
            consumer = known[0] if known else f"c{len(self.consumers) + 1}-{len(self.calls)}"
            self.consumers[consumer] = address
            return (200 if known else 201), self._lease(consumer)
        if len(rest) == 1 and rest[0] not in self.consumers:
            return 404, {"error": f"no consumer {rest[0]} on route {ROUTE}: join again"}
        if len(rest) == 1 and call.method == "PUT":
            return 200, self._lease(rest[0])
        if len(rest) == 1 and call.method == "DELETE":
            del self.consumers[rest[0]]
            return 200, {"left": rest[0], "route": ROUTE}
        return 404, {"error": "no such call"}

    def _lease(self, consumer: str) -> dict[str, Any]:
        return {"consumer": consumer, "address": self.consumers[consumer], "capacity": 100,
                "route": ROUTE, "lease_s": self.lease_s}  # fmt: skip

    def of(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method]


def serve_fake(fake: FakeSiding) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            call = Call(self.command, self.path, self.headers.get("Authorization"), body)
            status, answer = fake.answer(call)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_PUT = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def fake() -> Iterator[tuple[FakeSiding, str]]:
    siding = FakeSiding()
    server = serve_fake(siding)
    yield siding, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def test_pure_rules() -> None:
    assert renew_every(15.0) == 5.0
    assert [retry_after(n, 5.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert retry_after(1, 0.1) == 0.1
    assert advertised("10.0.0.5:0", 50051) == "10.0.0.5:50051"
    assert advertised("0.0.0.0:50051", 50051).endswith(":50051")
    assert not advertised("0.0.0.0:50051", 50051).startswith("0.0.0.0")
    assert join_body("h:1", None, None) == {"address": "h:1"}
    assert join_body("h:1/p", "http", 200) == {
        "address": "h:1/p",
        "transport": "http",
        "capacity": 200,
    }


def test_the_join_bodies_are_the_shared_vectors() -> None:
    vectors = Path(__file__).resolve().parents[2] / "testdata" / "join-requests.json"
    for case in json.loads(vectors.read_text())["cases"]:
        assert join_body(case["address"], case["transport"], case["capacity"]) == case["body"]


def test_joins_with_the_token_renews_every_third_of_the_lease_and_leaves_on_stop(
    fake: tuple[FakeSiding, str],
) -> None:
    siding, url = fake
    events: list[RegistrationEvent] = []
    registration = Registration(
        url, ROUTE, TOKEN, "127.0.0.1:8080/hook", transport="http", capacity=50,
        on_event=events.append,
    )  # fmt: skip
    registration.start()
    consumer = registration.consumer
    assert consumer is not None
    assert siding.consumers == {consumer: "127.0.0.1:8080/hook"}
    started = time.monotonic()
    eventually(lambda: len(siding.of("PUT")) >= 3)
    assert time.monotonic() - started >= 2 * LEASE_S / 3  # not faster than every lease/3
    registration.stop()
    join = siding.of("POST")[0]
    assert join.body == {"address": "127.0.0.1:8080/hook", "transport": "http", "capacity": 50}
    assert {c.authorization for c in siding.calls} == {f"Bearer {TOKEN}"}
    assert {c.path for c in siding.of("PUT")} == {f"/routes/{ROUTE}/consumers/{consumer}"}
    assert [c.path for c in siding.of("DELETE")] == [f"/routes/{ROUTE}/consumers/{consumer}"]
    assert siding.consumers == {}
    assert [e.kind for e in events] == ["joined", "left"]
    renewals = len(siding.of("PUT"))
    time.sleep(LEASE_S)
    assert len(siding.of("PUT")) == renewals  # stopped means stopped


def test_a_renewal_answered_404_joins_again(fake: tuple[FakeSiding, str]) -> None:
    siding, url = fake
    events: list[RegistrationEvent] = []
    with Registration(url, ROUTE, TOKEN, "127.0.0.1:50051", on_event=events.append) as reg:
        first = reg.consumer
        assert first is not None
        with siding.lock:
            siding.consumers.clear()  # the lease lapsed, or an operator removed it
        eventually(lambda: reg.consumer not in (None, first))
        assert list(siding.consumers) == [reg.consumer]
    assert [e.kind for e in events] == ["joined", "lapsed", "joined", "left"]
    assert events[1].status == 404
    assert events[1].consumer == first


def test_while_siding_is_away_it_backs_off_and_comes_back(fake: tuple[FakeSiding, str]) -> None:
    siding, url = fake
    events: list[RegistrationEvent] = []
    with Registration(url, ROUTE, TOKEN, "127.0.0.1:50051", on_event=events.append) as reg:
        siding.failing = 503
        eventually(lambda: sum(e.kind == "unreachable" for e in events) >= 3)
        consumer = reg.consumer
        siding.failing = None
        count = len(siding.calls)
        eventually(lambda: any(c.method == "PUT" for c in siding.calls[count:]))
        assert reg.consumer == consumer  # the same lease
    unreachable = [e for e in events if e.kind == "unreachable"]
    assert {e.status for e in unreachable} == {503}
    assert "siding is busy" in unreachable[0].detail


def test_siding_not_there_at_start_does_not_stop_the_service(fake: tuple[FakeSiding, str]) -> None:
    siding, url = fake
    siding.failing = 502
    events: list[RegistrationEvent] = []
    reg = Registration(url, ROUTE, TOKEN, "127.0.0.1:50051", on_event=events.append)
    reg.start()  # does not raise
    assert reg.consumer is None
    assert events[0].kind == "unreachable"
    siding.failing = None
    eventually(lambda: reg.consumer is not None, timeout_s=5)
    reg.stop()
    assert siding.consumers == {}
    # And with nothing listening at all: a connection error, reported, no exception
    nobody: list[RegistrationEvent] = []
    gone = Registration("http://127.0.0.1:9", ROUTE, TOKEN, "h:1", on_event=nobody.append)
    gone.start()
    gone.stop()
    assert [e.kind for e in nobody] == ["unreachable"]
    assert nobody[0].status is None
    assert "cannot be reached" in nobody[0].detail


@pytest.mark.parametrize(
    "case",
    [
        (ROUTE, "wrong", "h:1", 403, "wrong token"),
        ("nope", TOKEN, "h:1", 404, "no such route: nope"),
        (ROUTE, TOKEN, "nohost", 400, "address: 'nohost' has no port"),
    ],
)
def test_a_refused_first_join_raises_with_siding_s_reason(
    fake: tuple[FakeSiding, str], case: tuple[str, str, str, int, str]
) -> None:
    _, url = fake
    route, token, address, status, reason = case
    with pytest.raises(RegistrationError) as error:
        Registration(url, route, token, address).start()
    assert error.value.status == status
    assert str(error.value) == f"joining route {route} was refused ({status}): {reason}"


def test_the_token_is_never_logged_or_shown(
    fake: tuple[FakeSiding, str], caplog: pytest.LogCaptureFixture
) -> None:
    siding, url = fake
    caplog.set_level(logging.DEBUG, logger="siding_consumer")
    reg = Registration(url, ROUTE, TOKEN, "127.0.0.1:50051")
    reg.start()
    siding.failing = 500
    eventually(lambda: "unreachable" in caplog.text)
    siding.failing = None
    reg.stop()
    shown = caplog.text + repr(reg) + repr(Join(url, ROUTE, TOKEN))
    assert "joined" in caplog.text
    assert "left" in caplog.text
    assert TOKEN not in shown
    with pytest.raises(RegistrationError) as error:
        Registration(url, ROUTE, TOKEN + "x", "h:1").start()
    assert TOKEN not in str(error.value)


async def acks(_d: Delivery) -> Reply:
    return ack()


async def test_the_grpc_server_joins_once_it_listens_and_leaves_when_it_stops(
    fake: tuple[FakeSiding, str],
) -> None:
    siding, url = fake
    join = Join(url, ROUTE, TOKEN, capacity=7)
    server = ConsumerServer(acks, "127.0.0.1:0", join=join)
    await server.start()
    assert server.registration is not None
    assert siding.of("POST")[0].body == {
        "address": server.target,
        "transport": "grpc",
        "capacity": 7,
    }
    assert list(siding.consumers.values()) == [server.target]
    await server.stop(0)
    assert siding.consumers == {}
    assert len(siding.of("DELETE")) == 1
