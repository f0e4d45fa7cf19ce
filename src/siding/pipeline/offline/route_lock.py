"""One process at a time per route checkpoint: ``<checkpoint_dir>/<route>/siding.lock``.

``siding run`` holds it for each route while it runs, ``siding offsets reset --execute`` while
it moves the route; ``siding backfill`` holds its own, ``backfill.lock`` beside it (a backfill
runs beside the live route, never beside another backfill of it). It is an ``flock``: the
kernel drops it when its process ends, killed or not, so a crash never leaves a stale lock.
The file says who holds it (for the error line).

On a checkpoint that is not on a local file system (``s3a://``, ``hdfs://``) an ``flock`` would
guard nothing across machines: the lock is skipped, with one log line, and taking the route
there is the fence's job (docs/operations.md, "Checkpoints on object storage").
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from siding.errors import CheckpointError
from siding.pipeline.offline.storage import Place, place

log = logging.getLogger("siding.checkpoint")

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

    def __init__(self, route_dir: Place | Path, what: str, name: str = LOCK_FILE) -> None:
        where = place(route_dir)
        # None: the checkpoint is not on a local file system (no flock is taken there).
        self.local_dir = where.local
        self.route_dir = self.local_dir or Path(where.name)
        self.location = str(where)
        self.what = what
        self.name = name
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.route_dir / self.name

    def acquire(self, wait_s: float = 0.0) -> RouteLock:
        """Take the lock, trying for up to ``wait_s`` (another command may be peeking)."""
        if self.local_dir is None:
            log.info(
                "%s: checkpoint %s is not on a local file system: no local lock (%s) is taken",
                self.what,
                self.location,
                self.name,
            )
            return self
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


def holder(route_dir: Place | Path) -> str | None:
    """Who holds the route's lock now, or ``None`` (peeks with a shared lock, at once; never
    known on a checkpoint that is not local)."""
    local = place(route_dir).local
    if local is None:
        return None
    path = local / LOCK_FILE
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
