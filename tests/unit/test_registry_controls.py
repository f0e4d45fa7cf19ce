"""Routes controlled from the moment they are made at runtime until they are deleted: a batch
held by the pause of a deletion ends without starting (docs/registration.md)."""

from __future__ import annotations

import threading
import time

import pytest

from siding.config import parse_route
from siding.control.status import QueryHealth, health_document
from siding.control.tokens import bearer, same_token
from siding.pipeline.driver.controls import ControlError, RouteControls, RouteStopped
from siding.pipeline.driver.drain import Drain


def test_a_route_made_at_runtime_is_controlled_until_it_is_removed() -> None:
    controls = RouteControls({}, "siding.registry")
    route = parse_route({"name": "orders", "topic": "o", "group": "g"})
    with pytest.raises(ControlError):
        controls.pause("orders")
    controls.add(route)
    controls.pause("orders")
    assert controls.values("orders")["paused"] is True
    controls.remove("orders")
    assert controls.values("orders") == {}
    # A batch that starts after the removal does not start
    with pytest.raises(RouteStopped):
        controls.wait_while_paused("orders", threading.Event())
    # Made again, it runs
    controls.add(route)
    controls.wait_while_paused("orders", threading.Event())


def test_a_batch_held_by_the_pause_of_a_deletion_ends_without_starting() -> None:
    controls = RouteControls()
    controls.add(parse_route({"name": "orders", "topic": "o", "group": "g"}))
    controls.pause("orders")
    ended: list[BaseException | None] = []

    def batch() -> None:
        try:
            controls.wait_while_paused("orders", threading.Event(), poll_s=0.01)
            ended.append(None)
        except RouteStopped as exc:
            ended.append(exc)

    held = threading.Thread(target=batch)
    held.start()
    deadline = time.monotonic() + 5
    while controls.held("orders") != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert controls.held("orders") == 1
    controls.remove("orders")
    held.join(5)
    assert len(ended) == 1 and isinstance(ended[0], RouteStopped)
    assert controls.held("orders") == 0


def test_siding_waiting_for_routes_is_healthy_one_with_a_stopped_query_is_not() -> None:
    assert health_document([], idle_ok=True)[0] == 200
    assert health_document([])[0] == 503
    assert health_document([QueryHealth("q", False, "boom")], idle_ok=True)[0] == 503


def test_a_bearer_token_is_read_and_compared_whole() -> None:
    assert bearer("Bearer abc ") == "abc"
    assert bearer("bearer abc") == "abc"
    assert bearer("Basic abc") is None and bearer(None) is None and bearer("Bearer ") is None
    assert same_token("abc", "abc") and not same_token("abc", "abcd")
    assert not same_token("abc", None) and not same_token("", "")


def test_a_route_made_at_runtime_drains_and_one_made_again_is_not_held_as_stopped() -> None:
    drain = Drain({})
    drain.track("orders", 7.0, ["siding.orders.main"])
    assert drain.begin()
    assert drain.deadline("orders") == drain.began + 7.0
    drain.stop("siding.orders.main")
    drain.untrack("orders", ["siding.orders.main"])
    assert drain.deadline("orders") == drain.began
    drain.track("orders", 7.0, ["siding.orders.main"])
    assert not drain.stopping("siding.orders.main")
