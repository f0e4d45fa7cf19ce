"""Where the JVM parts live: the Kafka broker's jars, Spark's Kafka connector and (for
checkpoints on ``s3a://`` only) hadoop-aws with the AWS SDK modules it uses.

``python -m siding.jvm lock`` (a developer command) resolves the poms in ``jvm/`` with Maven and
writes the jar lock shipped in the package (``siding.jarcache``). At run time the locked jars are
fetched on first use into the jars folder (``jars_dir()``) and checked against the lock; ``make
setup`` fills the checkout's ``.jars/`` the same way. Spark's Ivy (``--packages``) does not read
Maven's settings, so siding hands Spark plain jar paths.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from siding.errors import SetupError
from siding.jarcache import (
    LOCK_FILE,
    SETS,
    JarLock,
    LockedJar,
    default_cache_dir,
    ensure,
    sha256_of,
)

JARS_DIR_ENV = "SIDING_JARS_DIR"

CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)*)\.jar$")


def checkout() -> Path | None:
    """The source checkout siding runs from (``SIDING_HOME`` overrides), or None when installed."""
    if env := os.environ.get("SIDING_HOME"):
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "jvm" / "kafka" / "pom.xml").is_file():
            return parent
    return None


def project_root() -> Path:
    """The source checkout: only the developer commands (``lock``, the benchmarks) need one."""
    root = checkout()
    if root is None:
        raise SetupError(
            "cannot find siding's jvm/ folder: set SIDING_HOME to the siding checkout"
            " or run from it"
        )
    return root


@functools.cache
def jar_lock() -> JarLock:
    return JarLock.load()


def jars_dir(configured: str | Path | None = None) -> Path:
    """Where the jars are: ``$SIDING_JARS_DIR``, else ``configured`` (``[spark] jars_dir``), else
    the checkout's ``.jars/``, else a per-user cache folder keyed by the lock."""
    if env := os.environ.get(JARS_DIR_ENV):
        return Path(env).expanduser()
    if configured:
        return Path(configured).expanduser()
    root = checkout()
    return root / ".jars" if root is not None else default_cache_dir(jar_lock())


# Extra options for every JVM siding starts: Spark's driver and executors, and the dev broker.
JAVA_OPTIONS_ENV = "SIDING_JAVA_OPTIONS"


def java_options(environ: Mapping[str, str] | None = None) -> list[str]:
    """``$SIDING_JAVA_OPTIONS`` as a list of JVM options (shell words): e.g. a lighter JIT and
    collector for short-lived runs (the test suite sets ``-XX:TieredStopAtLevel=1
    -XX:+UseSerialGC``: about half the CPU of a start, docs/platform.md)."""
    return shlex.split((os.environ if environ is None else environ).get(JAVA_OPTIONS_ENV, ""))


def require_tool(name: str, install_hint: str) -> str:
    """The path of a required executable, or a one-line error saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise SetupError(f"`{name}` not found on PATH: install {install_hint}")
    return path


def require_java() -> str:
    return require_tool(
        "java", "a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)"
    )


def artifact_name(jar_file: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: how duplicates are recognised."""
    match = _VERSIONED_JAR.match(jar_file)
    return match.group("artifact") if match else jar_file.removesuffix(".jar")


def jars_to_keep(candidates: list[str], already_shipped: list[str]) -> list[str]:
    """The connector's jars minus those whose artifact pyspark already ships (any version)."""
    shipped = {artifact_name(name) for name in already_shipped}
    return sorted(name for name in candidates if artifact_name(name) not in shipped)


# Jars older than these have known vulnerabilities: kafka-clients < 3.9.1 has CVE-2025-27817
# (SASL/OAUTHBEARER endpoint URLs can read files and URLs) and CVE-2025-27818 (JndiLoginModule).
JAR_FLOORS: dict[str, tuple[tuple[int, ...], str]] = {
    "kafka-clients": ((3, 9, 1), "CVE-2025-27817, CVE-2025-27818"),
}


def _release(version: str) -> tuple[int, ...]:
    """``3.9.2`` -> (3, 9, 2); ``4.0.0-rc1`` -> (4, 0, 0): the numeric release part."""
    head = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in head.group(0).split(".")) if head else ()


def below_floor(jar_files: list[str]) -> list[str]:
    """Pure: why each of ``jar_files`` older than its floor in ``JAR_FLOORS`` must not be used."""
    problems = []
    for name in jar_files:
        match = _VERSIONED_JAR.match(name)
        floor = JAR_FLOORS.get(match.group("artifact")) if match else None
        if match and floor and _release(match.group("version")) < floor[0]:
            needed = ".".join(str(part) for part in floor[0])
            problems.append(f"{name} is older than {needed} ({floor[1]})")
    return problems


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def kafka_classpath() -> str:
    """Classpath for the embedded broker's JVM (its jars fetched on first use)."""
    jars = ensure(jars_dir(), "kafka", jar_lock())
    return os.pathsep.join(str(jar) for jar in jars)


def object_storage_jars(configured: str | Path | None = None) -> list[Path]:
    """hadoop-aws and the AWS SDK modules it uses (the ``s3`` set), fetched on first use."""
    return ensure(jars_dir(configured), "s3", jar_lock())


def spark_jars(configured: str | Path | None = None, *, s3a: bool = False) -> list[str]:
    """Jars to put on ``spark.jars``: Spark's Kafka connector at pyspark's exact version, and
    with ``s3a`` the ``s3`` set (a checkpoint on ``s3a://``)."""
    lock = jar_lock()
    if lock.pyspark != pyspark_version():
        raise SetupError(
            f"siding's jar lock is for pyspark {lock.pyspark} but pyspark {pyspark_version()} is"
            f" installed: install pyspark=={lock.pyspark}"
            " (in a checkout: `python -m siding.jvm lock`)"
        )
    jars = ensure(jars_dir(configured), "spark", lock)
    expected = f"{CONNECTOR_ARTIFACT}-{pyspark_version()}.jar"
    if not any(jar.name == expected for jar in jars):
        raise SetupError(f"{expected} is not in siding's jar lock: `python -m siding.jvm lock`")
    if problems := below_floor([jar.name for jar in jars]):
        raise SetupError(f"{'; '.join(problems)} in siding's jar lock: `python -m siding.jvm lock`")
    if s3a:
        jars = [*jars, *object_storage_jars(configured)]
    return [str(jar) for jar in jars]


def fetch(target: Path | None = None, source_dir: Path | None = None) -> Path:
    """Every jar set into ``target`` (default: ``jars_dir()``), from Maven or ``source_dir``."""
    folder = target or jars_dir()
    for name in SETS:
        ensure(folder, name, jar_lock(), source_dir=source_dir)
    return folder


def parse_dependency_list(text: str) -> list[tuple[str, Path]]:
    """Pure: ``mvn dependency:list -DoutputAbsoluteArtifactFilename=true`` output ->
    (``group:artifact:version[:classifier]``, the jar in the local repository) per jar."""
    found = []
    for raw in text.splitlines():
        line = raw.split(" -- ")[0].removesuffix(" (optional)").strip()
        head, sep, path = line.partition(":/")
        fields = head.split(":")
        if not sep or len(fields) not in (5, 6) or fields[2] != "jar":
            continue
        group, artifact, _type = fields[:3]
        classifier = fields[3] if len(fields) == 6 else ""
        version = fields[-2]
        coordinates = f"{group}:{artifact}:{version}" + (f":{classifier}" if classifier else "")
        found.append((coordinates, Path("/" + path)))
    return sorted(found)


def _dependency_list(root: Path, pom: Path, extra: list[str]) -> list[tuple[str, Path]]:
    mvn = require_tool("mvn", "Apache Maven 3.6+ (e.g. `apt-get install maven`)")
    with tempfile.TemporaryDirectory(prefix="siding-lock-") as tmp:
        listing = Path(tmp) / "list.txt"
        command = [
            mvn,
            "-B",
            "-q",
            "-gs",
            str(root / "jvm" / "maven-settings.xml"),
            "-f",
            str(pom),
            "dependency:list",
            "-DincludeScope=runtime",
            "-DoutputAbsoluteArtifactFilename=true",
            f"-DoutputFile={listing}",
            *extra,
        ]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise SetupError(f"mvn failed for {pom}:\n{tail}")
        return parse_dependency_list(listing.read_text())


def _locked(coordinates: str, path: Path) -> LockedJar:
    return LockedJar(coordinates, path.name, path.stat().st_size, sha256_of(path))


def make_lock() -> JarLock:
    """Resolve the poms with Maven and lock the result; the spark and s3 sets keep only the jars
    whose artifact pyspark does not already ship (any version), as Spark would load pyspark's
    first."""
    require_java()
    root = project_root()
    spark_version = pyspark_version()
    poms = {
        "kafka": root / "jvm" / "kafka" / "pom.xml",
        "spark": root / "jvm" / "spark" / "pom.xml",
        "s3": root / "jvm" / "s3" / "pom.xml",
    }
    kafka = _dependency_list(root, poms["kafka"], [])
    spark = _dependency_list(root, poms["spark"], [f"-Dspark.version={spark_version}"])
    s3 = _dependency_list(root, poms["s3"], [])
    shipped = [p.name for p in pyspark_jars_dir().glob("*.jar")]
    keep = set(jars_to_keep([p.name for _, p in (*spark, *s3)], shipped))
    return JarLock(
        pyspark=spark_version,
        poms={str(p.relative_to(root)): sha256_of(p) for p in poms.values()},
        sets={
            "kafka": tuple(_locked(c, p) for c, p in kafka),
            "spark": tuple(_locked(c, p) for c, p in spark if p.name in keep),
            "s3": tuple(_locked(c, p) for c, p in s3 if p.name in keep),
        },
    )


def write_lock() -> Path:
    lock = make_lock()
    for name, jars in lock.sets.items():
        names = [jar.file for jar in jars]
        if len(set(names)) != len(names):
            raise SetupError(f"two jars of the {name} set have the same file name: {names}")
    if problems := below_floor([jar.file for jar in lock.sets["spark"]]):
        raise SetupError("; ".join(problems))
    target = project_root() / "src" / "siding" / LOCK_FILE.name
    target.write_text(lock.as_json())
    jar_lock.cache_clear()
    kafka = [j.file for j in lock.sets["kafka"] if j.file.startswith("kafka_2.13-")]
    spark = ", ".join(j.file for j in lock.sets["spark"])
    s3_mb = sum(j.size for j in lock.sets["s3"]) / 1e6
    print(f"{target}: broker {kafka[0] if kafka else '?'}; spark connector -> {spark}")
    print(f"  s3a: {len(lock.sets['s3'])} jars, {s3_mb:.1f} MB")
    return target


USAGE = """usage: python -m siding.jvm lock | fetch
  lock   resolve jvm/kafka, jvm/spark and jvm/s3's pom.xml with mvn into src/siding/jars.lock.json
  fetch  fetch the locked jars into the jars folder (the checkout's .jars/; make setup runs it)"""


def main(argv: list[str]) -> int:
    # `resolve` was the name of `fetch` when it ran mvn itself: kept for old stamps and habits.
    commands = {"lock": write_lock, "fetch": fetch, "resolve": fetch}
    if len(argv) != 2 or argv[1] not in commands:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        done = commands[argv[1]]()
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if argv[1] != "lock":
        print(f"jars: {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
