"""The checkpoint storage interface: its pure path rules, and the local implementation."""

from __future__ import annotations

from pathlib import Path

import pytest

from siding.pipeline.offline import storage
from siding.pipeline.offline.hadoop_fs import hadoop_settings, java_error
from siding.pipeline.offline.route_lock import RouteLock, holder
from siding.pipeline.offline.storage import LOCAL, Place


@pytest.mark.parametrize(
    ("base", "parts", "joined"),
    [
        ("s3a://bucket/siding", ("orders", "main"), "s3a://bucket/siding/orders/main"),
        ("s3a://bucket/siding/", ("orders/main",), "s3a://bucket/siding/orders/main"),
        ("hdfs://nn:8020/ck", ("r",), "hdfs://nn:8020/ck/r"),
        ("/var/lib/siding", ("orders", "main"), "/var/lib/siding/orders/main"),
        ("relative/ck", ("r",), "relative/ck/r"),
    ],
)
def test_join_keeps_a_uris_double_slash(base: str, parts: tuple[str, ...], joined: str) -> None:
    # pathlib would fold s3a://bucket into s3a:/bucket, which Hadoop reads as another place
    assert storage.join(base, *parts) == joined


@pytest.mark.parametrize(
    ("location", "local"),
    [
        ("/srv/ck", Path("/srv/ck")),
        ("file:///srv/ck", Path("/srv/ck")),
        ("file://localhost/srv/c%20k", Path("/srv/c k")),
        ("s3a://bucket/ck", None),
        ("hdfs://nn/ck", None),
        ("file://otherhost/ck", None),
    ],
)
def test_only_plain_paths_and_local_file_uris_are_local(location: str, local: Path | None) -> None:
    assert storage.local_path(location) == local


def test_scheme_name_and_parent_of_a_location() -> None:
    assert storage.scheme("S3A://b/x") == "s3a"
    assert storage.scheme("/tmp/x") == ""
    assert storage.name_of("s3a://b/ck/orders/") == "orders"
    assert storage.parent_of("s3a://b/ck/orders") == "s3a://b/ck"
    assert storage.parent_of("/a/b") == "/a"


def test_hadoop_settings_are_spark_hadoop_keys_without_their_prefix() -> None:
    conf = {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.sql.shuffle.partitions": "4",
        "spark.hadoop.": "ignored",
    }
    assert hadoop_settings(conf) == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.path.style.access": "true",
    }


def test_a_java_error_is_one_line_without_its_stack() -> None:
    class Java:
        def toString(self) -> str:
            return "java.nio.file.AccessDeniedException: s3a://b/k: 403\n\tat org.Foo(Foo.java:1)"

    class Raised(Exception):
        java_exception = Java()

    assert java_error(Raised()) == "java.nio.file.AccessDeniedException: s3a://b/k: 403"


def test_a_local_place_replaces_files_whole_and_lists_folders(tmp_path: Path) -> None:
    # Given a route folder on the local storage
    route = storage.place(tmp_path / "ck" / "orders")
    assert not route.exists() and route.iterdir() == []
    # When files are written (parents made), replaced and a folder made beside them
    (route / "siding-owner.json").replace("first")
    (route / "siding-owner.json").replace("second")
    (route / "main" / "offsets" / "0").replace(b"v1")
    # Then each reads whole; the listing knows files from folders; no temporary file stays
    assert (route / "siding-owner.json").read_text() == "second"
    assert sorted(p.name for p in route.iterdir()) == ["main", "siding-owner.json"]
    assert [p.name for p in route.folders()] == ["main"]
    assert route.is_dir() and not (route / "siding-owner.json").is_dir()
    assert route.local == tmp_path / "ck" / "orders"
    # And a missing file reads as FileNotFoundError; renames and deletes are the file system's
    with pytest.raises(FileNotFoundError):
        (route / "nothing").read_bytes()
    (route / "main").rename(route / "main.set-aside")
    assert [p.name for p in route.folders()] == ["main.set-aside"]
    (route / "siding-owner.json").unlink()
    (route / "siding-owner.json").unlink()  # a missing file is fine
    assert not (route / "siding-owner.json").exists()


class _Remote:
    """A storage that says it is remote (no file system behind it: nothing may touch it)."""

    remote = True


def test_the_local_lock_is_skipped_on_a_remote_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a route folder on storage that is not a local file system
    remote = Place(_Remote(), "s3a://bucket/ck/orders")  # type: ignore[arg-type]
    # When siding run takes its lock there
    with caplog.at_level("INFO", logger="siding.checkpoint"):
        lock = RouteLock(remote, "siding run of route orders").acquire(wait_s=0.1)
    # Then no flock is taken (it would guard nothing across machines), and the log says so
    assert "s3a://bucket/ck/orders is not on a local file system" in caplog.text
    assert lock.lost() is None and holder(remote) is None
    lock.release()
    # While a local checkpoint still gets its flock
    local = RouteLock(Place(LOCAL, str(tmp_path)), "siding run of route orders").acquire()
    try:
        assert holder(tmp_path) is not None
    finally:
        local.release()
