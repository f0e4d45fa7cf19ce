"""Pure: the fence's lease, read from the route's ``state-fence`` topic (docs/operations.md, "Two
drivers for one route: the fence").

Each record says: ``holder`` holds the route at ``epoch`` for ``lease_s`` from when it is read
(or has ``released`` it). A claim writes ``epoch + 1``; the log's order settles a race: the
first record of the highest epoch names the holder, and a record of a lower epoch, or of the
same epoch by another driver, changes nothing (``fold``). Every node times the lease on its own
monotonic clock, from when it *read* the last record that changed or renewed it (``decide``);
the holder times its own from before it *sent* the renewal and gives up earlier
(``HOLDER_SHARE``), so no clocks are compared across machines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

# The holder counts its lease as this share of ``lease_s`` from the renewal's send: the rest is
# the margin for the time between its check and its write, and for clock-rate drift.
HOLDER_SHARE = 0.8


@dataclass(frozen=True)
class Lease:
    epoch: int
    holder: str
    lease_s: float
    released: bool = False


def encode(lease: Lease, at_ms: int) -> tuple[bytes, bytes]:
    """The record's (key, value): keyed by epoch, so compaction keeps one record per epoch."""
    value = {
        "epoch": lease.epoch,
        "holder": lease.holder,
        "lease_ms": round(lease.lease_s * 1000),
        "state": "released" if lease.released else "held",
        "at_ms": at_ms,
    }
    return str(lease.epoch).encode(), json.dumps(value, sort_keys=True).encode()


def decode(value: bytes | None) -> Lease | None:
    """A record's lease, or ``None`` for a tombstone or a record that is not one."""
    if not value:
        return None
    try:
        data = json.loads(value)
        epoch, holder, lease_ms = int(data["epoch"]), str(data["holder"]), int(data["lease_ms"])
        released = data["state"] == "released"
    except (ValueError, KeyError, TypeError):
        return None
    if epoch < 1 or lease_ms <= 0 or not holder:
        return None
    return Lease(epoch, holder, lease_ms / 1000, released)


def fold(current: Lease | None, record: Lease) -> Lease | None:
    """The lease after ``record``, or ``None`` when ``record`` changes nothing (an older epoch,
    or a losing claim of the same epoch)."""
    if current is None or record.epoch > current.epoch:
        return record
    if record.epoch == current.epoch and record.holder == current.holder:
        return record
    return None


def fold_all(current: Lease | None, records: Iterable[Lease]) -> tuple[Lease | None, bool]:
    """``records`` folded in log order; whether any of them renewed or changed the lease."""
    changed = False
    for record in records:
        after = fold(current, record)
        if after is not None:
            current, changed = after, True
    return current, changed


@dataclass(frozen=True)
class Free:
    """Nobody holds the route: claim ``epoch``."""

    epoch: int


@dataclass(frozen=True)
class Held:
    """``holder`` holds the route at ``epoch``; it is free in ``expires_in_s`` unless renewed."""

    holder: str
    epoch: int
    expires_in_s: float


Verdict = Free | Held


def decide(current: Lease | None, seen_at: float, now: float) -> Verdict:
    """Whether a driver that read ``current`` (last renewed or changed at ``seen_at``, its own
    monotonic clock; the time it started watching for a lease it found there) may claim it at
    ``now``. The lease length is the holder's, as its record says."""
    if current is None:
        return Free(1)
    if current.released:
        return Free(current.epoch + 1)
    left = seen_at + current.lease_s - now
    if left <= 0:
        return Free(current.epoch + 1)
    return Held(current.holder, current.epoch, left)


def outwaited(current: Lease | None, found_at: float, seen_at: float) -> bool:
    """Whether a driver started without ``--standby`` should give up on the lease it found held
    at ``found_at`` (its own monotonic clock, once its first read of the topic came back): it
    read a renewal (``seen_at``) more than one lease length after that, so the holder is alive.
    A dead holder's last record, however late the read that brought it, never makes a driver
    give up: its lease runs out and the route is taken (a restart after a SIGKILL)."""
    if current is None or current.released:
        return False
    return seen_at - found_at > current.lease_s


def holder_until(sent_at: float, lease_s: float) -> float:
    """Until when (the holder's monotonic clock) a renewal sent at ``sent_at`` keeps the route:
    always before any other driver's ``decide`` frees it, which times from after the write."""
    return sent_at + lease_s * HOLDER_SHARE


def won(current: Lease | None, me: str, epoch: int) -> bool:
    """Whether the lease read back after a claim of ``epoch`` is ``me``'s."""
    return current is not None and current == Lease(epoch, me, current.lease_s) and epoch > 0


def newer(epoch: int, records: Iterable[Lease]) -> int | None:
    """The highest epoch above ``epoch`` among ``records`` (a claim that fences it), or ``None``."""
    above = [r.epoch for r in records if r.epoch > epoch]
    return max(above) if above else None
