"""The driver JVM's class-data archive: Spark's classes parsed once, mapped at every start.

A Spark driver loads, parses and verifies some 10,000 classes from pyspark's jars at each start:
on a loaded two-core machine about 40 % of the 20-50 s before its first job is done.
Java's class-data sharing (AppCDS) keeps those classes in a file the JVM maps instead:
``siding jars archive`` makes it (a short Spark run whose JVM writes what it loaded at its exit,
``-XX:ArchiveClassesAtExit``) and every later Spark start of the same Java and pyspark maps it
(``-XX:SharedArchiveFile``). docs/operations.md, "Faster starts", has the numbers.

The file is keyed by what it is valid for (the Java runtime, pyspark's version and its folder,
which make the classpath), so an upgrade of either just finds no archive: the start is as
before, never wrong.
A JVM that cannot use an archive (another classpath, options that change its layout) starts
without it; its warning is silenced, as the archive is only ever a speed-up.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

ARCHIVE_DIR_ENV = "SIDING_JVM_ARCHIVE_DIR"
SUFFIX = ".jsa"
_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def archive_key(java_home: str, modules: tuple[int, int], pyspark: str, spark_jars: str) -> str:
    """The archive's name: the Java runtime (its folder, and the size and mtime of its module
    image, which change with any update of the JDK), pyspark's version and the folder of its
    jars (the driver's classpath: each venv's pyspark has an archive of its own)."""
    size, mtime_ns = modules
    made_of = f"{java_home}\n{size}\n{mtime_ns}\n{pyspark}\n{spark_jars}"
    return hashlib.sha256(made_of.encode()).hexdigest()[:16]


def use_options(archive: Path) -> list[str]:
    """The driver's JVM options that map ``archive``."""
    return [f"-XX:SharedArchiveFile={archive}", *_QUIET]


def dump_options(archive: Path) -> list[str]:
    """The JVM options that write the classes the JVM loaded into ``archive`` at its exit."""
    return [f"-XX:ArchiveClassesAtExit={archive}", *_QUIET]


def archive_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$SIDING_JVM_ARCHIVE_DIR``, else a per-user cache folder."""
    env = os.environ if environ is None else environ
    if folder := env.get(ARCHIVE_DIR_ENV):
        return Path(folder).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "siding" / "jvm-archive"


def java_home(environ: Mapping[str, str] | None = None) -> Path | None:
    """The Java runtime Spark will start: ``$JAVA_HOME``, else the ``java`` on PATH (as
    Spark's launcher chooses); ``None`` when there is none."""
    env = os.environ if environ is None else environ
    if home := env.get("JAVA_HOME"):
        return Path(home).resolve()
    java = shutil.which("java", path=env.get("PATH"))
    return Path(java).resolve().parent.parent if java else None


def archive_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where this Java and pyspark's archive is (whether or not it was made), or ``None`` when
    there is no Java runtime to key it by."""
    from siding.jvm import pyspark_jars_dir, pyspark_version

    home = java_home(environ)
    if home is None:
        return None
    try:
        stat = (home / "lib" / "modules").stat()
    except OSError:
        return None
    modules = (stat.st_size, stat.st_mtime_ns)
    key = archive_key(str(home), modules, pyspark_version(), str(pyspark_jars_dir().resolve()))
    return archive_dir(environ) / f"{key}{SUFFIX}"


def existing(environ: Mapping[str, str] | None = None) -> Path | None:
    """This Java and pyspark's archive when it was made, else ``None``."""
    path = archive_path(environ)
    return path if path is not None and path.is_file() else None
