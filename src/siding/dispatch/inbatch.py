"""Key mode: a retry delivered by the batch during which it falls due (issue 27, item 5).

Pure rules (no I/O), written down in docs/dispatch.md ("A retry that falls due inside its
batch"). The window asks ``retry_in_batch`` whether a ``ToLane`` answer may wait in the batch for
its time, ``read_before_due`` whether a retried record read back from the hold topic waits for
its time in the batch, and, once nothing else keeps the batch running (``only_waiting``), how
long it may wait for them (``wait_until``) and which must leave (``leaving``: they then take the
hold topic's path, as before).
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


# How long past its other work a batch may wait for the retries it holds, when they are most
# of what is left of its slice (``wait_until``): about one main-lane batch of a key route on a
# small machine, the time the next batch would take to deliver them (docs/dispatch.md, "A retry
# that falls due inside its batch").
WAIT_FOR_DUE_MS = 1_000


def only_waiting(
    due: Iterable[tuple[int, int]], waiters: Collection[int], *, others_out: bool, now_ms: int
) -> bool:
    """Whether nothing but retries waiting for their time keeps the batch running.

    ``due`` is every (due epoch ms, index) the window still has to send, ``others_out`` whether
    anything else keeps the batch running (a call out, an answer not read yet, a suspect).
    """
    if not waiters or others_out:
        return False
    return all(index in waiters and due_ms > now_ms for due_ms, index in due)


def wait_until(
    now_ms: int, *, waiting_lines: int, free_lines: int, bound_ms: int = WAIT_FOR_DUE_MS
) -> int:
    """Until when (epoch ms) a batch that has just run out of other work (``only_waiting``) may
    wait for its retries: ``bound_ms`` more when more of the slice's lines wait for a retry
    than are free (keys whose records are all done: their next records wait for the next batch
    meanwhile), else not at all.

    Waiting costs nothing to a key that is blocked anyway, and delivers its retry up to a whole
    batch sooner; it costs a free key the wait. Decided once per batch, when it first runs out
    of other work: a key freed during the wait was not free then and pays nothing for it.
    """
    return now_ms + bound_ms if waiting_lines > free_lines else now_ms


def leaving(due: Iterable[tuple[int, int]], waiters: Collection[int], until_ms: int) -> set[int]:
    """The waiting retries that leave the batch now: those due after ``until_ms``. (Each takes
    the hold topic's path; the others stay and are delivered when they fall due.)"""
    return {index for due_ms, index in due if index in waiters and due_ms > until_ms}
