"""The fence's gate in Spark's Python workers: a write of a fenced route's records goes out only
while no driver has claimed the route at a newer epoch than the batch's (docs/operations.md,
"Two drivers for one route: the fence").

Each worker process follows the route's fence topic (one tail per topic) and reads what is new
right before each write; the window left is the time between that read and the write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from siding.errors import FenceLost
from siding.kafka.tail import TopicTail
from siding.pipeline.executor.lease import decode, newer
from siding.routing.producer import OutRecord

# A worker that cannot read the fence within this refuses the write (the batch runs again).
READ_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class FencePlan:
    """The fence a batch runs under: the route's fence topic and its driver's epoch."""

    route: str
    topic: str
    epoch: int


_lock = threading.Lock()
_tails: dict[tuple[str, tuple[tuple[str, str], ...]], TopicTail] = {}
_highest: dict[str, int] = {}


def check(fence: FencePlan | None, client_conf: Mapping[str, object]) -> None:
    """Raise ``FenceLost`` when a newer epoch than ``fence``'s was claimed; nothing without a
    fence. Reads the fence topic up to its end first."""
    if fence is None:
        return
    key = (fence.topic, tuple(sorted((k, str(v)) for k, v in client_conf.items())))
    with _lock:
        tail = _tails.get(key)
        if tail is None:
            tail = _tails[key] = TopicTail(client_conf, fence.topic)
        leases = [lease for _, value in tail.read_new(READ_TIMEOUT_S) if (lease := decode(value))]
        seen = newer(_highest.get(fence.topic, 0), leases)
        if seen is not None:
            _highest[fence.topic] = seen
        highest = _highest.get(fence.topic, 0)
    if highest > fence.epoch:
        raise FenceLost(
            f"route {fence.route}: its fence passed to epoch {highest} (this batch's is"
            f" {fence.epoch}); write refused"
        )


def guarded(
    fence: FencePlan | None,
    client_conf: Mapping[str, object],
    write: Callable[[Sequence[OutRecord]], None],
) -> Callable[[Sequence[OutRecord]], None]:
    """``write``, checked against ``fence`` first each time (a parked call's settlement is
    written long after its batch's plan came)."""
    if fence is None:
        return write

    def fenced(records: Sequence[OutRecord]) -> None:
        check(fence, client_conf)
        write(records)

    return fenced
