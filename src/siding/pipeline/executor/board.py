"""The suspect board of an endpoint shared by every Python worker of one machine (executor side).

The main lane and the park lane run in different Python workers, so the board
(``siding.dispatch.board``) is a small file beside the budgets: a counter and a ring of
sightings, read and written under a POSIX record lock of its first byte. Monotonic time is the
machine's, the same in every process. A worker that dies with a suspect out leaves its sighting
``OUT`` until the bound it was written with (the call's deadline), no longer.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from siding.dispatch.board import SIGHTINGS, Seen, Sighting, was_out_with

_HEAD = struct.Struct("<q")  # sightings written so far
_ENTRY = struct.Struct("<qddq")  # its number, sent_at, until, seen
_ENTRIES_AT = 64
_SIZE = _ENTRIES_AT + SIGHTINGS * _ENTRY.size


def board_path(directory: Path, endpoint: str) -> Path:
    """One board per consumer endpoint: every route that sends to it sees its deaths."""
    digest = hashlib.sha256(f"board\0{endpoint}".encode()).hexdigest()[:32]
    return directory / f"{digest}.board"


class SharedBoard:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < _SIZE:
            os.ftruncate(self._fd, _SIZE)
        self._map = mmap.mmap(self._fd, _SIZE)

    def out(self, until: float) -> int:
        with self._locked():
            (mark,) = _HEAD.unpack_from(self._map, 0)
            _ENTRY.pack_into(self._map, _at(mark), mark, time.monotonic(), until, Seen.OUT)
            _HEAD.pack_into(self._map, 0, mark + 1)
        return int(mark)

    def ended(self, mark: int, died: bool) -> None:
        with self._locked():
            number, sent_at, _, _ = _ENTRY.unpack_from(self._map, _at(mark))
            if number != mark:
                return  # written over: a ring's worth of suspects went out since
            seen = Seen.DIED if died else Seen.ENDED
            _ENTRY.pack_into(self._map, _at(mark), mark, sent_at, time.monotonic(), seen)

    def was_out_with(self, started: float, lost_at: float) -> bool:
        with self._locked():
            (written,) = _HEAD.unpack_from(self._map, 0)
            entries = [
                _ENTRY.unpack_from(self._map, _at(mark))
                for mark in range(max(0, written - SIGHTINGS), written)
            ]
        sightings = [Sighting(sent_at, until, Seen(seen)) for _, sent_at, until, seen in entries]
        return was_out_with(sightings, started, lost_at)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, 0)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)


def _at(mark: int) -> int:
    return _ENTRIES_AT + (mark % SIGHTINGS) * _ENTRY.size


_boards: dict[Path, SharedBoard] = {}


def shared_board(path: Path) -> SharedBoard:
    """This process's one handle on ``path`` (one descriptor per file: closing another would
    drop the process's locks on it)."""
    board = _boards.get(path)
    if board is None:
        board = _boards[path] = SharedBoard(path)
    return board
