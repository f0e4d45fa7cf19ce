"""The librdkafka names siding knows are the installed librdkafka's, exactly (the Java names are
compared with Spark's kafka-clients jar in tests/integration/test_kafka_clients_jvm.py)."""

from __future__ import annotations

import confluent_kafka

from siding.config.kafka_names import JAVA, LIBRDKAFKA
from siding.devkit.kafka_names import TARGET, librdkafka_names, render, table_names

TABLE = """\
## Global configuration properties

Property                                 | C/P | Range           |       Default | Importance | Description
-----------------------------------------|-----|-----------------|--------------:|------------| ----------
client.id                                |  *  |                 |       rdkafka | low        | Client identifier.
fetch.wait.max.ms                        |  C  | 0 .. 300000     |           500 | low        | Maximum time.
## Topic configuration properties
acks                                     |  P  | -1 .. 1000      |            -1 | high       | Alias for `request.required.acks`.
"""  # noqa: E501


def test_the_table_parser_reads_every_row_of_both_sections() -> None:
    assert table_names(TABLE) == {"client.id", "fetch.wait.max.ms", "acks"}


def test_the_generated_librdkafka_names_are_the_installed_librdkafkas() -> None:
    assert librdkafka_names() == LIBRDKAFKA
    version = confluent_kafka.libversion()[0]
    assert f"librdkafka {version} " in TARGET.read_text()


def test_the_generated_file_is_what_render_writes() -> None:
    text = TARGET.read_text()
    java_version = text.split("kafka-clients ")[1].split(" ")[0]
    version = confluent_kafka.libversion()[0]
    assert render(LIBRDKAFKA, JAVA, version, java_version) == text
