"""Against Spark's own kafka-clients jar (in the test session's JVM): the Java names siding knows
are the jar's, and the JAAS setting siding writes parses back to the same credentials."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from pydantic import SecretStr

from siding.config.fields import Setting
from siding.config.kafka_clients import split_settings
from siding.config.kafka_names import JAVA
from siding.devkit.kafka_names import TARGET, java_names, java_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_the_generated_java_names_are_the_spark_jars(spark: SparkSession) -> None:
    jvm = spark._jvm
    assert java_names(jvm) == JAVA
    assert f"kafka-clients {java_version(jvm)} " in TARGET.read_text()


@pytest.mark.parametrize(
    ("mechanism", "username", "password"),
    [
        ("SCRAM-SHA-512", "svc", "plain-Pa55"),
        ("PLAIN", "team a", 'q"uo\\te\\"d \\n \\1 ;} {'),
        ("SCRAM-SHA-256", "ünï", "=,$@'"),
    ],
)
def test_kafkas_jaas_parser_reads_back_the_credentials(
    spark: SparkSession, mechanism: str, username: str, password: str
) -> None:
    shared: dict[str, Setting] = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": SecretStr(password),
    }
    jaas = split_settings(shared).java["sasl.jaas.config"]
    assert isinstance(jaas, SecretStr)
    jvm: Any = spark._jvm
    config = jvm.org.apache.kafka.common.security.JaasContext.loadClientContext(
        jvm.java.util.Map.of(
            "sasl.jaas.config",
            jvm.org.apache.kafka.common.config.types.Password(jaas.get_secret_value()),
        )
    )
    [entry] = list(config.configurationEntries())
    options = entry.getOptions()
    assert (options.get("username"), options.get("password")) == (username, password)
    expected = "Scram" if mechanism.startswith("SCRAM") else "Plain"
    assert entry.getLoginModuleName().endswith(f".{expected}LoginModule")
