"""One backfill of a route at a time: the second is refused before it reads or delivers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from siding.config import parse_config
from siding.pipeline.driver.backfill import LOCK_FILE, run_backfill
from siding.pipeline.driver.backfill_range import BackfillError, parse_bound
from siding.pipeline.offline import moves
from siding.pipeline.offline.route_lock import RouteLock

# Nothing listens on this port: a backfill that got past the lock would fail reaching Kafka.
CONFIG = """
[kafka]
bootstrap = "127.0.0.1:9"
[spark]
checkpoint_dir = "{checkpoints}"
[[route]]
name = "billing"
topic = "t"
group = "g"
endpoint = "grpc://127.0.0.1:9"
"""

HOLD = """
import sys, time
from pathlib import Path
from siding.pipeline.offline.route_lock import RouteLock
RouteLock(Path(sys.argv[1]), "siding backfill billing", sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_backfill_of_a_route_is_refused_while_one_runs(tmp_path: Path) -> None:
    config = parse_config(CONFIG.format(checkpoints=tmp_path), env={})
    route_dir = moves.route_dir_of(config, config.route[0])
    bounds = (
        parse_bound("earliest", single_topic="t", now_ms=0, option="--from"),
        parse_bound("latest", single_topic="t", now_ms=0, option="--to"),
    )
    # Given a backfill of the route running in another process
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(route_dir), LOCK_FILE],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # When a second one starts, Then it is refused, naming the running one's process
        with pytest.raises(BackfillError) as refused:
            run_backfill(config, "billing", *bounds)
        assert "another backfill of it is running" in str(refused.value)
        assert f"pid {holder.pid}" in str(refused.value)
        # and the live route's own lock is a different one: a running route does not stop it
        RouteLock(route_dir, "siding run").acquire().release()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    # And once the first is gone (even killed) the lock is free again
    RouteLock(route_dir, "siding backfill billing", LOCK_FILE).acquire().release()
