"""What the peers share: the error that reports why a peer could not run, the rebuild rule, and a
peer program running in its own process while the benchmark produces traffic."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from siding.devkit.process import stop_process


class PeerUnavailable(Exception):
    """The peer could not be built or run; the message is the exact reason for the report."""


def is_stale(built: Path | Sequence[Path], sources: Sequence[Path]) -> bool:
    """True when any output is missing or older than any source."""
    outputs = [built] if isinstance(built, Path) else list(built)
    if not all(p.exists() for p in outputs):
        return True
    oldest = min(p.stat().st_mtime for p in outputs)
    return any(s.stat().st_mtime > oldest for s in sources)


def output_tail(text: str, lines: int = 6) -> str:
    """The last non-empty ``lines`` of a program's output, on one line."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` that is a JSON object, in order."""
    found: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def last_json_line(text: str) -> dict[str, Any]:
    """The last line of ``text`` that is a JSON object, or ``{}``."""
    found = json_lines(text)
    return found[-1] if found else {}


class PeerProcess:
    """A peer program in a child process; its output goes to files under ``workdir`` so it can
    never block on a full pipe. ``check`` raises ``PeerUnavailable`` once it exited unexpectedly
    (with ``expect_exit``, a clean exit is expected)."""

    def __init__(
        self, command: Sequence[str], label: str, workdir: Path, *, expect_exit: bool = False
    ) -> None:
        self.command = list(command)
        self.label = label
        self.expect_exit = expect_exit
        self._dir = Path(tempfile.mkdtemp(prefix=f"peer-{label}-", dir=workdir))
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PeerProcess:
        with (self._dir / "out").open("wb") as out, (self._dir / "err").open("wb") as err:
            self._proc = subprocess.Popen(self.command, stdout=out, stderr=err)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        """The program's process id while it runs (for its CPU), else None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def stdout(self) -> str:
        return (self._dir / "out").read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return (self._dir / "err").read_text(errors="replace")

    def check(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is None:
            return
        if self.expect_exit and proc.returncode == 0:
            return
        reason = last_json_line(self.stdout).get("error") or output_tail(self.stderr)
        raise PeerUnavailable(f"{self.label} exited {proc.returncode}: {reason}")

    def wait_for_line(self, key: str, timeout_s: float, poll_s: float = 0.1) -> dict[str, Any]:
        """Until the program printed a JSON line with ``key``; that line."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            line = next((v for v in json_lines(self.stdout) if key in v), None)
            if line is not None:
                return line
            if time.monotonic() >= deadline:
                raise PeerUnavailable(f"{self.label} printed no {key!r} in {timeout_s:g}s")
            time.sleep(poll_s)

    def wait(self, timeout_s: float) -> int:
        """Wait for the program to exit by itself; its exit code."""
        if self._proc is None:
            raise PeerUnavailable(f"{self.label} was not started")
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise PeerUnavailable(f"{self.label} still running after {timeout_s:g}s") from exc

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout_s)
