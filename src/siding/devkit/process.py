"""Child processes of tests and benchmarks: ``siding run`` started as a user would, and stopped
the way a service manager would (SIGTERM, a grace, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_ENTRY = "from siding.cli.main import main; main()"


def start_siding_run(
    config: Path, log: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``siding run -c config *args`` in a session of its own (a signal to its group reaches
    only it), its output appended to ``log``; ``env`` is added to this process's environment."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", _ENTRY, "run", "-c", str(config), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """Ask ``proc`` to stop and wait for it; kill it if it is still there after ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_group(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM ``proc``'s process group (a server started in a session of its own) and wait;
    SIGKILL the group if it is still there after ``timeout_s``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)
