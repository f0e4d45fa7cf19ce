"""Polling with a deadline: the way tests, the demo and benchmarks wait (never sleep-and-hope)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold in time; the message says what was awaited and the last value."""


def wait_until(
    probe: Callable[[], T],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.1,
    what: str = "condition",
    check: Callable[[], None] | None = None,
) -> T:
    """Call ``probe`` until it returns something truthy and return that.

    ``check`` runs on every round and may raise to stop early (e.g. re-raise a streaming query's
    exception instead of waiting the whole timeout).
    """
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        if check is not None:
            check()
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g}s waiting for {what}; last: {last!r}")
        time.sleep(interval_s)
