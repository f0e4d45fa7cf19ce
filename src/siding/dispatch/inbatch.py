"""Key mode: a retry delivered by the batch during which it falls due (issue 27, item 5).

Pure rules (no I/O), written down in docs/dispatch.md ("A retry that falls due inside its
batch"). The window asks ``retry_in_batch`` whether a ``ToLane`` answer may wait in the batch for
its time, ``read_before_due`` whether a retried record read back from the hold topic waits for
its time in the batch, and ``give_up`` whether the waiting retries must leave it (they then take
the hold topic's path, as before).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from siding.dispatch.settings import DispatchSettings
from siding.dispatch.work import Work
from siding.model import LaneHop, Ordering
from siding.steps import Resent, ToLane


def retry_in_batch(
    work: Work, step: ToLane, settings: DispatchSettings, now_ms: int
) -> Work | None:
    """The retry of ``work`` (answered ``step`` at ``now_ms``) as this batch would deliver it,
    or ``None`` when it must leave the batch at once.

    Only a keyed record of the main lane of a ``key`` route, at its first failure in the main
    lane, waits: it comes back as the record its lane would deliver (``step``'s attempt and
    lane, that lane's deadline, due at ``step.not_before_ms``) with the hop it made. A retry
    that fails again, and every record of other lanes and routes, goes on as before.
    """
    delivery = work.delivery
    if settings.ordering is not Ordering.KEY or delivery.key is None:
        return None
    if settings.lane != 0 or delivery.lane != 0 or not 1 <= step.lane <= len(settings.lanes):
        return None
    hop = LaneHop(delivery.lane, delivery.attempt, now_ms, step.reason)
    return Work(
        replace(delivery, attempt=step.attempt, lane=step.lane),
        step.not_before_ms,
        deadline_s=settings.lanes[step.lane - 1].deadline_s,
        hops=(*work.hops, hop),
    )


def read_before_due(work: Work, settings: DispatchSettings, now_ms: int) -> Resent | None:
    """A retried record the main lane read back from the hold topic before its time: the step
    it takes if it leaves the batch before it falls due (written back unchanged), else ``None``
    (it is due, or not such a record)."""
    if settings.ordering is not Ordering.KEY or work.delivery.key is None or settings.lane != 0:
        return None
    if work.delivery.lane == 0 or work.not_before_ms <= now_ms:
        return None
    return Resent(work.not_before_ms)


def give_up(
    due: Iterable[tuple[int, int]], waiters: Collection[int], *, others_out: bool, now_ms: int
) -> bool:
    """Whether the retries waiting in the batch (``waiters``, indices) must leave it now.

    ``due`` is every (due epoch ms, index) the window still has to send, ``others_out`` whether
    anything else keeps the batch running (a call out, an answer not read yet, a suspect). A
    retry waits only while the batch has other work: once every send left is a waiting retry
    not due yet, waiting would hold the batch, and every key behind it, for the retry alone.
    """
    if not waiters or others_out:
        return False
    return all(index in waiters and due_ms > now_ms for due_ms, index in due)
