"""The driver JVM's class-data archive (``siding jars archive``): a Spark start maps the one
``make setup`` made, and an archive the JVM cannot use is passed over, silently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from siding import jvmarchive

ROOT = Path(__file__).resolve().parents[2]
# A Spark start in a process of its own (the test process may have its JVM up already) that
# runs one job; argv[1]: "default" (siding's choice) or extra driver options, shell words.
_START = """
import shlex, sys
from siding import jvmarchive
from siding.pipeline.driver.session import build_session
extra = None if sys.argv[1] == "default" else shlex.split(sys.argv[1])
spark = build_session("local[1]", app_name="archive-test", driver_options=extra)
print("rows", spark.range(5).count())
spark.stop()
"""


def _start(options: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", _START, options]
    return subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )


def _made() -> Path:
    """The archive of this Java and pyspark (`make setup` made it; made here if not)."""
    siding = Path(sys.executable).with_name("siding")
    done = subprocess.run(
        [str(siding), "jars", "archive"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    archive = jvmarchive.existing()
    assert archive is not None and str(archive) == done.stdout.strip()
    return archive


def test_spark_starts_on_the_archive_setup_made() -> None:
    archive = _made()
    # -Xshare:on: a JVM that cannot map the archive refuses to start instead of going on
    options = " ".join([*jvmarchive.use_options(archive), "-Xshare:on"])
    done = _start(options)
    assert done.returncode == 0 and "rows 5" in done.stdout, done.stderr[-2000:]


def test_an_archive_the_jvm_cannot_use_is_passed_over_without_a_word(tmp_path: Path) -> None:
    environ = {"SIDING_JVM_ARCHIVE_DIR": str(tmp_path)}
    target = jvmarchive.archive_path(environ)
    assert target is not None
    target.write_bytes(b"not an archive" * 100)
    done = _start("default", **environ)
    assert done.returncode == 0 and "rows 5" in done.stdout, done.stderr[-2000:]
    assert "archive" not in done.stderr.lower() and "cds" not in done.stderr.lower()
