"""Regenerate ``siding/config/kafka_names.py``: the property names each Kafka client knows.

``python -m siding.devkit.kafka_names`` asks the real libraries: librdkafka (the one bundled with
confluent-kafka) prints its property table, and Spark's kafka-clients jar lists its consumer,
producer and admin settings through the JVM of a local SparkSession. The tests ask them again
and compare, so the file cannot drift from the installed versions.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from siding.errors import SetupError

_TABLE_ROW = re.compile(r"^([a-z][a-z0-9._-]*)\s+\|\s*[*CP]\s*\|", re.MULTILINE)
_JAVA_CONFIGS = (
    "org.apache.kafka.clients.consumer.ConsumerConfig",
    "org.apache.kafka.clients.producer.ProducerConfig",
    "org.apache.kafka.clients.admin.AdminClientConfig",
)
TARGET = Path(__file__).resolve().parents[1] / "config" / "kafka_names.py"


def librdkafka_library() -> Path:
    """The librdkafka shared library confluent-kafka loads (bundled in its wheel)."""
    import confluent_kafka

    package = Path(confluent_kafka.__file__).parent
    for folder in (package.parent / "confluent_kafka.libs", package.parent / "confluent_kafka"):
        found = sorted(folder.glob("librdkafka*.so*")) + sorted(folder.glob("librdkafka*.dylib"))
        if found:
            return found[0]
    raise SetupError(f"cannot find the librdkafka library bundled with {package}")


def librdkafka_table() -> str:
    """librdkafka's own property table (``rd_kafka_conf_properties_show``), as Markdown."""
    lib = ctypes.CDLL(str(librdkafka_library()))
    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    with tempfile.TemporaryFile() as out:
        stream = libc.fdopen(os.dup(out.fileno()), b"w")
        lib.rd_kafka_conf_properties_show(stream)
        libc.fclose(stream)
        out.seek(0)
        return out.read().decode()


def table_names(table: str) -> frozenset[str]:
    """Pure: the property names (global and topic-level, aliases too) in librdkafka's table."""
    return frozenset(_TABLE_ROW.findall(table))


def librdkafka_names() -> frozenset[str]:
    return table_names(librdkafka_table())


def java_names(jvm: Any) -> frozenset[str]:
    """Every consumer, producer and admin setting of the kafka-clients jar ``jvm`` has loaded."""
    names: set[str] = set()
    for class_name in _JAVA_CONFIGS:
        config_class = jvm
        for part in class_name.split("."):
            config_class = getattr(config_class, part)
        names.update(str(name) for name in config_class.configNames())
    return frozenset(names)


def java_version(jvm: Any) -> str:
    return str(jvm.org.apache.kafka.common.utils.AppInfoParser.getVersion())


def render(
    librdkafka: Iterable[str], java: Iterable[str], librdkafka_version: str, java_version: str
) -> str:
    """Pure: the text of ``siding/config/kafka_names.py``."""

    def block(name: str, names: Iterable[str]) -> str:
        lines = "".join(f'        "{n}",\n' for n in sorted(names))
        return f"{name} = frozenset(\n    {{\n{lines}    }}\n)\n"

    return (
        '"""The property names each Kafka client knows: generated, do not edit.\n\n'
        f"librdkafka {librdkafka_version} (confluent-kafka), kafka-clients {java_version}"
        " (Spark's Kafka connector).\n"
        'Regenerate with ``python -m siding.devkit.kafka_names``; the tests compare."""\n\n'
        + block("LIBRDKAFKA", librdkafka)
        + "\n"
        + block("JAVA", java)
    )


def main() -> None:
    import confluent_kafka

    from siding.pipeline.driver.session import build_session

    spark = build_session("local[1]", app_name="siding-kafka-names")
    try:
        jvm = spark._jvm  # py4j's gateway: how Python reaches the jar
        text = render(
            librdkafka_names(),
            java_names(jvm),
            confluent_kafka.libversion()[0],
            java_version(jvm),
        )
    finally:
        spark.stop()
    TARGET.write_text(text)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
