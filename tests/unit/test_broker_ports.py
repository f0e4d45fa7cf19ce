"""The embedded broker's ports: one allocation never hands out the same port twice (a broker
refuses to format with two listeners on one port)."""

from __future__ import annotations

import socket
from types import TracebackType
from typing import ClassVar

import pytest

from siding.devkit import broker


class LowestFreePort:
    """A stand-in for the kernel's port 0: the lowest port no open socket holds, so a port
    closed before the next bind is handed out again at once (what a real kernel may do)."""

    held: ClassVar[set[int]] = set()

    def __init__(self, family: int, kind: int) -> None:
        assert (family, kind) == (socket.AF_INET, socket.SOCK_STREAM)
        self.port = 0

    def bind(self, address: tuple[str, int]) -> None:
        assert address[1] == 0
        self.port = min(p for p in range(40_000, 40_100) if p not in self.held)
        self.held.add(self.port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.held.discard(self.port)

    def __enter__(self) -> LowestFreePort:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@pytest.fixture
def lowest_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    LowestFreePort.held = set()
    monkeypatch.setattr(socket, "socket", LowestFreePort)  # the module broker.py binds with


@pytest.mark.usefixtures("lowest_free_port")
def test_ports_asked_for_one_at_a_time_can_collide_so_the_broker_asks_for_all_at_once() -> None:
    # When each port is asked for after the previous socket closed
    one_by_one = [broker.free_port(), broker.free_port(), broker.free_port()]
    # Then the same port can come back (the "two listeners on the same port" refusal)
    assert len(set(one_by_one)) == 1
    # When the broker's ports are asked for together
    together = broker.free_ports(3)
    # Then they all differ, and none is left held
    assert len(set(together)) == 3
    assert not LowestFreePort.held


def test_real_ports_asked_for_together_all_differ_and_are_free_again() -> None:
    for _ in range(50):
        ports = broker.free_ports(3)
        assert len(set(ports)) == 3
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
