"""``$SIDING_JAVA_OPTIONS`` reaches every JVM siding starts: Spark's driver and executors (the
session's settings) and the dev broker's command line."""

from __future__ import annotations

import pytest

from siding.jvm import JAVA_OPTIONS_ENV, java_options
from siding.pipeline.driver.session import session_conf


def test_the_options_are_shell_words() -> None:
    env = {JAVA_OPTIONS_ENV: "-XX:TieredStopAtLevel=1  -Dname='a b'"}
    assert java_options(env) == ["-XX:TieredStopAtLevel=1", "-Dname=a b"]
    assert java_options({}) == []


def test_spark_driver_and_executors_get_them_beside_the_log_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-XX:+UseSerialGC -Dname='a b'")
    conf = session_conf("local[2]")
    for side in ("driver", "executor"):
        options = conf[f"spark.{side}.extraJavaOptions"]
        assert options.startswith("-Dlog4j2.configurationFile=file:")
        assert options.endswith(" -XX:+UseSerialGC '-Dname=a b'")


def test_without_them_spark_gets_only_the_log_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JAVA_OPTIONS_ENV, raising=False)
    options = session_conf("local[2]")["spark.driver.extraJavaOptions"]
    assert options.startswith("-Dlog4j2.configurationFile=file:")
    assert " " not in options


def test_spark_status_store_is_bounded_unless_the_config_says_otherwise() -> None:
    # Spark keeps 1,000 jobs, stages and SQL executions and 100,000 tasks by default, UI off or on
    conf = session_conf("local[2]")
    assert conf["spark.ui.retainedJobs"] == "100"
    assert conf["spark.ui.retainedStages"] == "100"
    assert conf["spark.ui.retainedTasks"] == "10000"
    assert conf["spark.sql.ui.retainedExecutions"] == "100"
    mine = session_conf("local[2]", ui=True, extra={"spark.ui.retainedJobs": "500"})
    assert mine["spark.ui.retainedJobs"] == "500"
    assert mine["spark.sql.ui.retainedExecutions"] == "100"
