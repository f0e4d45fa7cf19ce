"""The jars are fetched once, checked against the lock before they are used, and the lock
shipped in the package is the one the poms give. A local HTTP server stands in for Maven."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from siding import jarcache, jvm
from siding.cli import main
from siding.config import load_config
from siding.errors import SetupError
from siding.jarcache import JarLock, LockedJar

CONNECTOR = b"connector bytes " * 1000
CLIENTS = b"kafka-clients bytes " * 700
AWS = b"hadoop-aws bytes " * 300


def _jar(coordinates: str, content: bytes) -> LockedJar:
    group, artifact, version = coordinates.split(":")
    del group
    return LockedJar(
        coordinates,
        f"{artifact}-{version}.jar",
        len(content),
        hashlib.sha256(content).hexdigest(),
    )


LOCK = JarLock(
    pyspark="4.2.0",
    poms={},
    sets={
        "kafka": (_jar("org.apache.kafka:kafka-clients:3.9.2", CLIENTS),),
        "spark": (_jar("org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0", CONNECTOR),),
        "s3": (_jar("org.apache.hadoop:hadoop-aws:3.5.0", AWS),),
    },
)
_SPARK = "spark-sql-kafka-0-10_2.13"
PATHS = {
    "/maven2/org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar": CLIENTS,
    f"/maven2/org/apache/spark/{_SPARK}/4.2.0/{_SPARK}-4.2.0.jar": CONNECTOR,
}


class Repository:
    """A Maven repository on 127.0.0.1 that counts requests and may serve other bytes."""

    def __init__(self) -> None:
        self.files = dict(PATHS)
        self.requests: list[str] = []
        repo = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                repo.requests.append(self.path)
                body = repo.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                del format, args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/maven2"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def repository() -> Iterator[Repository]:
    repo = Repository()
    yield repo
    repo.close()


def _leftovers(folder: Path) -> list[str]:
    return sorted(
        p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".verified"
    )


def test_jars_are_downloaded_verified_and_never_fetched_again(
    repository: Repository, tmp_path: Path
) -> None:
    # When the kafka set is asked for twice
    first = jarcache.ensure(tmp_path, "kafka", LOCK, repo=repository.url)
    second = jarcache.ensure(tmp_path, "kafka", LOCK, repo=repository.url)
    # Then it was downloaded once, is the lock's, and readable by whoever runs siding
    assert first == second == [tmp_path / "kafka" / "kafka-clients-3.9.2.jar"]
    assert first[0].read_bytes() == CLIENTS
    assert first[0].stat().st_mode & 0o777 == 0o644
    # (the stamp that says they were verified too: a folder filled by root is used by a service
    # user, or by an image's uid 10001, which cannot write it)
    assert (tmp_path / "kafka" / ".verified").stat().st_mode & 0o777 == 0o644
    assert len(repository.requests) == 1
    assert _leftovers(tmp_path / "kafka") == []


def test_a_corrupted_download_is_refused_and_nothing_is_put_in_place(
    repository: Repository, tmp_path: Path
) -> None:
    # Given a repository that serves other bytes for the jar
    path = next(p for p in PATHS if p.endswith("kafka-clients-3.9.2.jar"))
    repository.files[path] = CLIENTS[:-1] + b"!"
    # When it is fetched
    with pytest.raises(SetupError) as refused:
        jarcache.ensure(tmp_path, "kafka", LOCK, repo=repository.url)
    # Then one line names the jar and says why; no jar and no temporary file is left
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("kafka-clients-3.9.2.jar from http://127.0.0.1:")
    assert "does not match the jar lock" in message and "refused" in message
    assert list((tmp_path / "kafka").iterdir()) == []


def test_a_jar_already_there_but_different_is_replaced(
    repository: Repository, tmp_path: Path
) -> None:
    # Given a folder with the right jar under the wrong content (say, an interrupted copy)
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "spark-sql-kafka-0-10_2.13-4.2.0.jar").write_bytes(b"half")
    # When the set is asked for, then the jar is fetched again and is the lock's
    [jar] = jarcache.ensure(tmp_path, "spark", LOCK, repo=repository.url)
    assert jar.read_bytes() == CONNECTOR


def test_jars_found_equal_to_the_lock_are_not_downloaded(
    repository: Repository, tmp_path: Path
) -> None:
    # Given a folder filled by someone else (make setup, a copy) with the right bytes
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "kafka-clients-3.9.2.jar").write_bytes(CLIENTS)
    # Then nothing is downloaded
    jarcache.ensure(tmp_path, "kafka", LOCK, repo=repository.url)
    assert repository.requests == []


def test_offline_with_nothing_cached_is_one_error_naming_the_command(tmp_path: Path) -> None:
    # Given a repository nobody listens on
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        url = f"http://127.0.0.1:{closed.server_address[1]}/maven2"
    with pytest.raises(SetupError) as failed:
        jarcache.ensure(tmp_path, "spark", LOCK, repo=url)
    message = str(failed.value)
    assert "\n" not in message
    assert "cannot download spark-sql-kafka-0-10_2.13-4.2.0.jar" in message
    assert "`siding jars fetch`" in message and "--from DIR" in message


@pytest.mark.parametrize("nested", [True, False])
def test_jars_are_taken_from_a_folder_and_checked(tmp_path: Path, nested: bool) -> None:
    # Given a siding jars folder (kafka/, spark/, s3/) or one flat folder of jars
    source = tmp_path / "source"
    for name, content in (("kafka", CLIENTS), ("spark", CONNECTOR), ("s3", AWS)):
        jar = LOCK.sets[name][0]
        where = source / name if nested else source
        where.mkdir(parents=True, exist_ok=True)
        (where / jar.file).write_bytes(content)
    # When both sets are taken from it
    target = tmp_path / "jars"
    for name in jarcache.SETS:
        jarcache.ensure(target, name, LOCK, source_dir=source, repo="http://127.0.0.1:9/none")
    # Then they are in place
    assert (target / "spark" / "spark-sql-kafka-0-10_2.13-4.2.0.jar").read_bytes() == CONNECTOR


def test_a_wrong_jar_in_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "kafka-clients-3.9.2.jar").write_bytes(b"not it")
    with pytest.raises(SetupError, match=r"^kafka-clients-3.9.2.jar from .* refused$"):
        jarcache.ensure(tmp_path / "jars", "kafka", LOCK, source_dir=tmp_path / "source")


def test_siding_jars_from_a_folder_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a jars folder chosen by the environment and a source folder with both sets
    monkeypatch.setattr(jvm, "jar_lock", lambda: LOCK)
    monkeypatch.setenv("SIDING_JARS_DIR", str(tmp_path / "jars"))
    source = tmp_path / "offline"
    source.mkdir()
    (source / "kafka-clients-3.9.2.jar").write_bytes(CLIENTS)
    (source / "spark-sql-kafka-0-10_2.13-4.2.0.jar").write_bytes(CONNECTOR)
    (source / "hadoop-aws-3.5.0.jar").write_bytes(AWS)
    main._register()
    runner = CliRunner()
    # When `siding jars --from DIR` runs, then it prints the folder it filled
    done = runner.invoke(main.cli, ["jars", "--from", str(source)])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == str(tmp_path / "jars")
    assert (tmp_path / "jars" / "kafka" / "kafka-clients-3.9.2.jar").is_file()
    # And `siding jars path` names the same folder; the classpath is in it
    assert runner.invoke(main.cli, ["jars", "path"]).stdout.strip() == str(tmp_path / "jars")
    assert jvm.kafka_classpath() == str(tmp_path / "jars" / "kafka" / "kafka-clients-3.9.2.jar")


def test_the_jars_folder_is_the_environments_then_the_configs_then_the_checkouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDING_JARS_DIR", str(tmp_path / "env"))
    assert jvm.jars_dir(str(tmp_path / "configured")) == tmp_path / "env"
    monkeypatch.delenv("SIDING_JARS_DIR")
    assert jvm.jars_dir(str(tmp_path / "configured")) == tmp_path / "configured"
    monkeypatch.setenv("SIDING_HOME", str(tmp_path / "checkout"))
    assert jvm.jars_dir() == tmp_path / "checkout" / ".jars"
    # Installed (no checkout): a per-user cache folder, one per lock
    monkeypatch.setattr(jvm, "checkout", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert jvm.jars_dir() == tmp_path / "cache" / "siding" / "jars" / jvm.jar_lock().digest()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jvm.jars_dir().parent == tmp_path / "home" / ".cache" / "siding" / "jars"


def test_a_relative_jars_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "siding.toml"
    config.write_text(
        '[kafka]\nbootstrap = "127.0.0.1:9092"\n[spark]\njars_dir = "jars"\n'
        '[[route]]\nname = "r"\ntopic = "t"\ngroup = "g"\nendpoint = "grpc://127.0.0.1:1"\n'
    )
    assert load_config(config).spark.jars_dir == str(tmp_path / "jars")


def test_maven_dependency_lists_are_read() -> None:
    listing = """
The following files have been resolved:
   org.apache.kafka:kafka-clients:jar:3.9.2:compile:/m2/org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar -- module kafka.clients [auto]
   com.github.luben:zstd-jni:jar:1.5.6-10:runtime:/m2/zstd-jni-1.5.6-10.jar
   io.netty:netty-transport-native-epoll:jar:linux-x86_64:4.1.100.Final:runtime:/m2/n.jar (optional)
   org.example:not-a-jar:pom:1.0:compile:/m2/x.pom
"""  # noqa: E501
    assert jvm.parse_dependency_list(listing) == [
        ("com.github.luben:zstd-jni:1.5.6-10", Path("/m2/zstd-jni-1.5.6-10.jar")),
        (
            "io.netty:netty-transport-native-epoll:4.1.100.Final:linux-x86_64",
            Path("/m2/n.jar"),
        ),
        (
            "org.apache.kafka:kafka-clients:3.9.2",
            Path("/m2/org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar"),
        ),
    ]


# -- the lock shipped in the package ------------------------------------------------------------


def test_the_shipped_lock_was_made_from_these_poms() -> None:
    # After editing jvm/*/pom.xml: `python -m siding.jvm lock` (mvn), then commit the lock.
    lock = jvm.jar_lock()
    root = jvm.project_root()
    assert set(lock.poms) == {"jvm/kafka/pom.xml", "jvm/spark/pom.xml", "jvm/s3/pom.xml"}
    for pom, digest in lock.poms.items():
        assert jarcache.sha256_of(root / pom) == digest, f"{pom} changed: python -m siding.jvm lock"


def test_the_shipped_lock_is_for_this_pyspark_and_these_versions() -> None:
    lock = jvm.jar_lock()
    root = jvm.project_root()
    assert lock.pyspark == jvm.pyspark_version()
    spark_pom = (root / "jvm" / "spark" / "pom.xml").read_text()
    kafka_pom = (root / "jvm" / "kafka" / "pom.xml").read_text()
    spark = re.search(r"<spark\.version>([^<]+)</", spark_pom)
    kafka = re.search(r"<kafka\.version>([^<]+)</", kafka_pom)
    assert spark is not None and kafka is not None
    assert spark.group(1) == lock.pyspark
    spark_files = [jar.file for jar in lock.sets["spark"]]
    assert f"{jvm.CONNECTOR_ARTIFACT}-{lock.pyspark}.jar" in spark_files
    assert f"org.apache.kafka:kafka_2.13:{kafka.group(1)}" in [
        jar.coordinates for jar in lock.sets["kafka"]
    ]
    # Nothing pyspark ships twice, nothing below its floor
    shipped = {jvm.artifact_name(p.name) for p in jvm.pyspark_jars_dir().glob("*.jar")}
    assert not shipped & {jvm.artifact_name(name) for name in spark_files}
    assert jvm.below_floor(spark_files) == []
    for jars in lock.sets.values():
        for jar in jars:
            assert re.fullmatch(r"[0-9a-f]{64}", jar.sha256) and jar.size > 0
            assert jar.url(jarcache.CENTRAL).endswith(f"/{jar.file}")


def test_the_lock_reads_back_what_it_writes(tmp_path: Path) -> None:
    (tmp_path / "lock.json").write_text(jvm.jar_lock().as_json())
    assert JarLock.load(tmp_path / "lock.json") == jvm.jar_lock()
