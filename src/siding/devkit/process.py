"""Stopping a child process the way a service manager would: SIGTERM, a grace, then SIGKILL."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


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
