"""siding's Python daemon (``spark.python.daemon.module``): the path it imports pyspark from,
and that its imports start no thread before it forks workers (issue 29, cost)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from siding.pipeline.driver.session import session_conf
from siding.pipeline.executor import daemon


def _package(root: Path) -> Path:
    package = root / "site-packages" / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return package


def test_the_zips_shipped_inside_the_installed_pyspark_go_last(tmp_path: Path) -> None:
    # Given Spark's worker path: its pyspark and py4j zips (from the installed package) first
    package = _package(tmp_path)
    site = str(package.parent)
    lib = package / "python" / "lib"
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), "/jobs/extra.zip", site]
    # When the daemon orders it
    ordered = daemon.preferred_path(path, daemon.installed_pyspark(path))
    # Then the installed package comes before its own zips; other entries keep their order
    assert ordered == ["/jobs/extra.zip", site, path[0], path[1]]


def test_a_pyspark_zip_from_elsewhere_keeps_its_place(tmp_path: Path) -> None:
    # Given a Spark distribution's zip (SPARK_HOME) and another pyspark installed
    _package(tmp_path)
    site = str(tmp_path / "site-packages")
    path = ["/opt/spark/python/lib/pyspark.zip", site]
    # Then the distribution's zip stays first: the installed pyspark may be another version
    assert daemon.preferred_path(path, daemon.installed_pyspark(path)) == path


def test_without_an_installed_pyspark_the_path_is_unchanged(tmp_path: Path) -> None:
    path = ["/opt/spark/python/lib/pyspark.zip", str(tmp_path)]
    assert daemon.installed_pyspark(path) is None
    assert daemon.preferred_path(path, None) == path


def test_the_preloaded_imports_start_no_thread() -> None:
    # A fork copies only the forking thread: a thread started by an import (gRPC's core, a
    # Kafka client, an event loop) could leave a lock held in every worker.
    script = (
        "from siding.pipeline.executor import daemon\n"
        "names = daemon.preload()\n"
        "import pyspark\n"
        "print(daemon.threads(), 'pyspark.worker' in names, 'grpc' in names, pyspark.__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    threads, worker, grpc, pyspark_file = done.stdout.split()
    assert (threads, worker, grpc) == ("1", "True", "True"), done.stdout
    assert ".zip" not in pyspark_file


def test_sidings_sessions_fork_workers_from_its_daemon() -> None:
    conf = session_conf("local[2]")
    assert conf["spark.python.daemon.module"] == "siding.pipeline.executor.daemon"
    assert conf["spark.python.worker.reuse"] == "true"
