"""The driver JVM's class-data archive: its key, its options, where it is looked for."""

from __future__ import annotations

import shlex
from pathlib import Path

from siding import jvmarchive
from siding.pipeline.driver.session import session_conf

BASE = ("/usr/lib/jvm/java-17", (1000, 5), "4.2.0", "/venv/pyspark/jars")


def test_the_key_changes_with_the_java_runtime_pyspark_and_its_jars_folder() -> None:
    key = jvmarchive.archive_key(*BASE)
    others = [
        ("/usr/lib/jvm/java-21", *BASE[1:]),
        (BASE[0], (1001, 5), *BASE[2:]),  # the same JDK folder, updated
        (BASE[0], (1000, 6), *BASE[2:]),
        (*BASE[:2], "4.2.1", BASE[3]),
        (*BASE[:3], "/other-venv/pyspark/jars"),
    ]
    keys = {jvmarchive.archive_key(*other) for other in others}
    assert key not in keys and len(keys) == len(others)
    assert jvmarchive.archive_key(*BASE) == key


def test_using_and_dumping_name_the_file_and_keep_the_jvm_quiet() -> None:
    archive = Path("/cache/a.jsa")
    assert jvmarchive.use_options(archive)[0] == "-XX:SharedArchiveFile=/cache/a.jsa"
    assert jvmarchive.dump_options(archive)[0] == "-XX:ArchiveClassesAtExit=/cache/a.jsa"
    for options in (jvmarchive.use_options(archive), jvmarchive.dump_options(archive)):
        assert "-Xlog:cds=off" in options and "-Xlog:cds+dynamic=off" in options


def test_the_folder_is_the_setting_else_the_users_cache(tmp_path: Path) -> None:
    assert jvmarchive.archive_dir({"SIDING_JVM_ARCHIVE_DIR": str(tmp_path)}) == tmp_path
    cache = jvmarchive.archive_dir({"XDG_CACHE_HOME": str(tmp_path)})
    assert cache == tmp_path / "siding" / "jvm-archive"


def test_no_java_runtime_means_no_archive(tmp_path: Path) -> None:
    environ = {"PATH": str(tmp_path), "SIDING_JVM_ARCHIVE_DIR": str(tmp_path)}
    assert jvmarchive.java_home(environ) is None
    assert jvmarchive.archive_path(environ) is None
    assert jvmarchive.existing(environ) is None


def test_an_archive_is_used_only_once_it_was_made(tmp_path: Path) -> None:
    java_home = tmp_path / "jdk"
    (java_home / "lib").mkdir(parents=True)
    (java_home / "lib" / "modules").write_bytes(b"x" * 10)
    environ = {"JAVA_HOME": str(java_home), "SIDING_JVM_ARCHIVE_DIR": str(tmp_path / "a")}
    path = jvmarchive.archive_path(environ)
    assert path is not None and path.parent == tmp_path / "a" and path.suffix == ".jsa"
    assert jvmarchive.existing(environ) is None
    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert jvmarchive.existing(environ) == path


def test_the_archive_options_go_to_the_driver_alone() -> None:
    options = jvmarchive.use_options(Path("/cache/a.jsa"))
    conf = session_conf("local[2]", driver_options=options)
    driver = shlex.split(conf["spark.driver.extraJavaOptions"])
    executor = shlex.split(conf["spark.executor.extraJavaOptions"])
    assert driver[-len(options) :] == options
    assert not set(options) & set(executor)
    assert driver[: len(executor)] == executor


def test_a_failed_archive_run_says_the_jvms_own_reason() -> None:
    from siding.pipeline.driver.archive import _why

    stderr = (
        "WARNING: Using incubator modules\n"
        'Exception in thread "main" java.lang.ExceptionInInitializerError\n'
        "Caused by: java.net.UnknownHostException: box: box: Name or service not known\n"
        "\tat java.base/java.net.InetAddress.getLocalHost\n"
        "Caused by: java.net.UnknownHostException: box: Name or service not known\n"
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [JAVA_GATEWAY_EXITED] ...\n"
    )
    reason = "Caused by: java.net.UnknownHostException: box: Name or service not known"
    assert _why(stderr) == reason
    assert _why("error: the JVM wrote no archive to /x.part\n") == (
        "error: the JVM wrote no archive to /x.part"
    )
    assert _why("") == "no output"
