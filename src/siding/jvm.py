"""Where the JVM parts live: the Kafka broker's jars and Spark's Kafka connector.

``python -m siding.jvm resolve`` (run by ``make setup``) copies both sets from Maven Central with
``mvn dependency:copy-dependencies``, from the poms in ``jvm/``, into the ignored folder ``.jars/``.
Spark's Ivy (``--packages``) does not read Maven's settings, so siding hands Spark plain jar paths.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from siding.errors import SetupError

CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)*)\.jar$")


def project_root() -> Path:
    """The source checkout siding runs from (``SIDING_HOME`` overrides)."""
    if env := os.environ.get("SIDING_HOME"):
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "jvm" / "kafka" / "pom.xml").is_file():
            return parent
    raise SetupError(
        "cannot find siding's jvm/ folder: set SIDING_HOME to the siding checkout or run from it"
    )


def jars_dir() -> Path:
    if env := os.environ.get("SIDING_JARS_DIR"):
        return Path(env)
    return project_root() / ".jars"


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
    """Classpath for the embedded broker's JVM."""
    folder = jars_dir() / "kafka"
    jars = sorted(folder.glob("*.jar"))
    if not any(jar.name.startswith("kafka_2.13-") for jar in jars):
        raise SetupError(f"Kafka broker jars missing in {folder}: run `make setup`")
    return os.pathsep.join(str(jar) for jar in jars)


def spark_jars() -> list[str]:
    """Jars to put on ``spark.jars``: Spark's Kafka connector at pyspark's exact version."""
    folder = jars_dir() / "spark"
    jars = sorted(folder.glob("*.jar"))
    expected = f"{CONNECTOR_ARTIFACT}-{pyspark_version()}.jar"
    if not any(jar.name == expected for jar in jars):
        raise SetupError(f"{expected} missing in {folder}: run `make setup`")
    if problems := below_floor([jar.name for jar in jars]):
        raise SetupError(f"{'; '.join(problems)} in {folder}: run `make setup`")
    return [str(jar) for jar in jars]


def _copy_dependencies(pom: Path, out: Path, extra: list[str]) -> None:
    mvn = require_tool("mvn", "Apache Maven 3.6+ (e.g. `apt-get install maven`)")
    if out.exists():
        shutil.rmtree(out)
    command = [
        mvn,
        "-B",
        "-q",
        "-gs",
        str(pom.parent.parent / "maven-settings.xml"),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
        *extra,
    ]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SetupError(f"mvn failed for {pom}:\n{tail}")


def resolve() -> None:
    """Copy both jar sets into ``.jars/``; keep only what pyspark does not already ship."""
    require_java()
    root = project_root()
    target = jars_dir()
    spark_version = pyspark_version()
    _copy_dependencies(root / "jvm" / "kafka" / "pom.xml", target / "kafka", [])
    staging = target / "spark-staging"
    _copy_dependencies(
        root / "jvm" / "spark" / "pom.xml", staging, [f"-Dspark.version={spark_version}"]
    )
    keep = jars_to_keep(
        [p.name for p in staging.glob("*.jar")], [p.name for p in pyspark_jars_dir().glob("*.jar")]
    )
    final = target / "spark"
    if final.exists():
        shutil.rmtree(final)
    final.mkdir(parents=True)
    for name in keep:
        shutil.move(str(staging / name), final / name)
    shutil.rmtree(staging)
    spark_jars()  # fails loudly if the connector is not at pyspark's version
    kafka = sorted(p.name for p in (target / "kafka").glob("kafka_2.13-*.jar"))
    print(f"jars: broker {kafka[0] if kafka else '?'}; spark connector -> {', '.join(keep)}")


def main(argv: list[str]) -> int:
    if argv[1:] != ["resolve"]:
        print("usage: python -m siding.jvm resolve", file=sys.stderr)
        return 2
    try:
        resolve()
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
