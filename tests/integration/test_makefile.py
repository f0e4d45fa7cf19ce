"""The Makefile's own promises, run with the real GNU make on the real Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAMPS = (".stamps/venv", ".stamps/jars", ".stamps/image-tools")


def test_make_test_does_not_wait_for_the_image_build_it_starts_in_the_background(
    tmp_path: Path,
) -> None:
    # `make test` starts the image's build in the background (test-builds) so that it overlaps
    # the lint and pytest. A recipe that names $(MAKE) got make's jobserver pipe, and a make run
    # with -j then waited for the background build before it ended: pytest started only once
    # the image was built. The build here is a stand-in that outlives make by far.
    if shutil.which("make") is None:
        pytest.fail("GNU make is not installed: the Makefile cannot be checked")
    marker = tmp_path / "background-ended"
    log = tmp_path / "test-builds.log"
    old = [arg for stamp in STAMPS for arg in ("-o", stamp)]  # set-up's steps: not redone here
    # Under `make test` pytest inherits the outer make's flags (its -j and jobserver): not ours.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    started = time.monotonic()
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-j4",
            "--output-sync=target",
            *old,
            "test-builds",
            f"BACKGROUND_BUILD=sh -c 'sleep 20; echo built; touch {marker}'",
            f"TEST_BUILDS_LOG={log}",
        ],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    took = time.monotonic() - started
    assert not marker.exists(), f"make waited {took:.0f} s, until its background build ended"
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the background build never ran to its end"
    assert log.read_text() == "built\n"  # its output went where it was told
