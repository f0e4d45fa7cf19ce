"""One process at a time per route checkpoint: ``<checkpoint_dir>/<route>/siding.lock``.

``siding run`` holds it for each route while it runs, ``siding offsets reset --execute`` while
it moves the route; ``siding backfill`` holds its own, ``backfill.lock`` beside it (a backfill
runs beside the live route, never beside another backfill of it). It is an ``flock``: the
kernel drops it when its process ends, killed or not, so a crash never leaves a stale lock.
The file says who holds it (for the error line).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from siding.errors import CheckpointError

LOCK_FILE = "siding.lock"


class CheckpointBusy(CheckpointError):
    """Another process holds the route's checkpoint; ``holder`` says who."""

    def __init__(self, route_dir: Path, holder: str) -> None:
        super().__init__(f"checkpoint {route_dir} is in use by {holder}")
        self.route_dir = route_dir
        self.holder = holder


def _describe(text: str) -> str:
    try:
        data = json.loads(text)
        return f"{data['what']} (pid {data['pid']} on {data['host']}, since {data['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process"


class RouteLock:
    """``acquire`` or raise ``CheckpointBusy``; ``release`` (also when never acquired)."""

    def __init__(self, route_dir: Path, what: str, name: str = LOCK_FILE) -> None:
        self.route_dir = route_dir
        self.what = what
        self.name = name
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.route_dir / self.name

    def acquire(self, wait_s: float = 0.0) -> RouteLock:
        """Take the lock, trying for up to ``wait_s`` (another command may be peeking)."""
        self.route_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _describe(self.path.read_text())
                    os.close(fd)
                    raise CheckpointBusy(self.route_dir, holder) from None
                time.sleep(0.1)
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        info = {"what": self.what, "pid": os.getpid(), "host": socket.gethostname(), "since": since}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
        self._fd = fd
        return self

    def lost(self) -> str | None:
        """Why the lock no longer guards the checkpoint (its file removed or replaced, say by
        someone deleting the checkpoint folder: a second siding could then take a new one), or
        ``None`` while it does (or was never taken)."""
        if self._fd is None:
            return None
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return f"its checkpoint lock {self.path} was removed while it ran"
        held = os.fstat(self._fd)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return f"its checkpoint lock {self.path} was replaced while it ran"
        return None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.ftruncate(fd, 0)  # nobody holds it now
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def holder(route_dir: Path) -> str | None:
    """Who holds the route's lock now, or ``None`` (peeks with a shared lock, at once)."""
    path = route_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(path.read_text())
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
