"""The window's check for retries waiting in a batch (key mode, docs/dispatch.md "A retry that
falls due inside its batch") costs nothing to a batch that has none: since key5 it listed every
record still due on every round of the window, quadratic in the batch (poison_pills fell from
2,910 to 627 msg/s, bench/results/stop-41/bisect)."""

from __future__ import annotations

import pytest

from siding.dispatch import DispatchSettings, Work, dispatch, window
from siding.model import Delivery, Lane, delivery_id
from siding.steps import Done
from siding.transport.fake import ScriptedTransport

LANES = (Lane(delay_s=1.0, deadline_s=5.0),)


def rec(offset: int) -> Delivery:
    return Delivery(delivery_id("t", 0, offset), "t", 0, offset, None, b"v")


async def test_a_batch_with_no_waiting_retry_never_lists_what_is_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a window counting how often it asks whether only waiting retries are left
    asked = 0
    only_waiting = window.only_waiting  # type: ignore[attr-defined]

    def counted(*args: object, **kwargs: object) -> bool:
        nonlocal asked
        asked += 1
        return only_waiting(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(window, "only_waiting", counted)
    transport = ScriptedTransport(latency_s=0.001)
    settings = DispatchSettings(max_in_flight=10, deadline_s=5.0, lanes=LANES)
    # When an unordered batch of 200 records is delivered (no retry ever waits in it)
    report = await dispatch(transport, [Work(rec(i)) for i in range(200)], settings)
    # Then every record is done, and the check never had to look at what is due
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert asked == 0
