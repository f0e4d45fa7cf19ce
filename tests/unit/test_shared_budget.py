"""The budget shared by the Python workers of one machine: real processes, one file, the kernel's
record locks as the count (docs/dispatch.md, "One budget per route and endpoint")."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection
from pathlib import Path

from siding.pipeline.executor.budget import POLL_S, SharedBudget, budget_path, shared_budget


def _hold(path: str, limit: int, conn: Connection) -> None:
    """In another process: take every slot it can, say how many, hold them until killed."""
    budget = SharedBudget(Path(path), limit)
    leases = []
    while not isinstance(lease := budget.take(), float):
        leases.append(lease)
    conn.send(len(leases))
    time.sleep(60)


def _send_for(path: str, rate: float, seconds: float, conn: Connection) -> None:
    """In another process: start sends as fast as the rate allows for ``seconds``."""
    budget = SharedBudget(Path(path), 1000, rate)
    starts: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lease = budget.take()
        if isinstance(lease, float):
            time.sleep(min(lease, 0.005))
            continue
        starts.append(time.monotonic())
        lease.release()
    conn.send(starts)


def test_a_route_and_endpoint_has_one_file_per_scope(tmp_path: Path) -> None:
    live = budget_path(tmp_path, "orders", "grpc://a:1", "live")
    assert live == budget_path(tmp_path, "orders", "grpc://a:1", "live")
    assert live != budget_path(tmp_path, "orders", "grpc://a:1", "backfill")
    assert live != budget_path(tmp_path, "orders", "grpc://b:1", "live")
    assert live != budget_path(tmp_path, "payments", "grpc://a:1", "live")


def test_slots_held_by_one_worker_are_not_given_to_another_until_it_dies(tmp_path: Path) -> None:
    # Given a worker process holding slots of a budget of 5
    path = tmp_path / "b.budget"
    ctx = multiprocessing.get_context("spawn")
    ours = shared_budget(path, 5, 0.0)
    mine = ours.take()
    assert not isinstance(mine, float)
    parent, child = ctx.Pipe()
    holder = ctx.Process(target=_hold, args=(str(path), 5, child), daemon=True)
    holder.start()
    try:
        # Then it got the 4 left, and this process gets none more
        assert parent.recv() == 4
        assert ours.take() == POLL_S
        # When one of ours is given back, it is ours again at once
        mine.release()
        again = ours.take()
        assert not isinstance(again, float)
        assert ours.take() == POLL_S
    finally:
        # When the holder dies without giving anything back (a crashed Python worker)
        holder.kill()
        holder.join(10)
    # Then its 4 slots are free again (the kernel dropped its locks), and no more than that
    time.sleep(0.15)  # past a full scan's interval
    got = [ours.take() for _ in range(5)]
    assert sum(not isinstance(g, float) for g in got) == 4
    assert ours.held == 5


def test_workers_together_never_start_more_sends_in_a_second_than_the_rate(
    tmp_path: Path,
) -> None:
    # Given three worker processes sending as fast as a shared rate of 50/s lets them
    path = str(tmp_path / "r.budget")
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(3)]
    workers = [
        ctx.Process(target=_send_for, args=(path, 50.0, 2.5, child), daemon=True)
        for _, child in pipes
    ]
    for w in workers:
        w.start()
    starts = sorted(t for parent, _ in pipes for t in parent.recv())
    for w in workers:
        w.join(10)
    # Then no window of 1 s holds more than 50 sends, and the rate was used (not starved: the
    # pace is 50 / 1.1 = 45 per second)
    worst = max(sum(1 for t in starts[i:] if t < s + 1.0) for i, s in enumerate(starts))
    assert worst <= 50
    assert worst >= 42
