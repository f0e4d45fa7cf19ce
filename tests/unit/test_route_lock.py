"""One process at a time per route checkpoint (an flock the kernel drops with its process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from siding.pipeline.offline.route_lock import CheckpointBusy, RouteLock, holder

_HOLD = """
import sys, time
from pathlib import Path
from siding.pipeline.offline.route_lock import RouteLock
RouteLock(Path(sys.argv[1]), "siding run of route r").acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_held_lock_refuses_another_and_says_who_holds_it(tmp_path: Path) -> None:
    route_dir = tmp_path / "r"
    assert holder(route_dir) is None
    first = RouteLock(route_dir, "siding run of route r").acquire()
    try:
        assert holder(route_dir) is not None
        assert "siding run of route r (pid " in (holder(route_dir) or "")
        with pytest.raises(CheckpointBusy, match=f"checkpoint {route_dir} is in use by siding run"):
            RouteLock(route_dir, "siding offsets reset of route r").acquire(wait_s=0.3)
    finally:
        first.release()
    assert holder(route_dir) is None
    again = RouteLock(route_dir, "siding offsets reset of route r").acquire()
    again.release()
    again.release()  # twice is harmless


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    route_dir = tmp_path / "r"
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(route_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert f"pid {child.pid}" in (holder(route_dir) or "")
        with pytest.raises(CheckpointBusy):
            RouteLock(route_dir, "another").acquire()
    finally:
        child.kill()
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
    assert holder(route_dir) is None
    RouteLock(route_dir, "another").acquire().release()
