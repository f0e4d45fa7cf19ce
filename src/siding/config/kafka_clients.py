"""One ``[kafka]`` table, two clients: librdkafka (confluent-kafka) and Spark's Java client.

Pure: from the shared settings and the two per-client tables, the settings each client gets and
the notes ``check-config`` prints. The rules are written down in docs/configuration.md:

- a name both clients know goes to both; a name one knows goes to that one only, with a note;
  a name neither knows goes to both (librdkafka refuses it loudly), with a note;
- librdkafka's SASL and CA keys are translated for Java: ``sasl.username`` + ``sasl.password``
  become ``sasl.jaas.config``, ``sasl.mechanisms`` becomes ``sasl.mechanism``, ``ssl.ca.location``
  and ``ssl.ca.pem`` become a PEM trust store, ``ssl.endpoint.identification.algorithm=none``
  becomes ``""``;
- ``[kafka.librdkafka]`` and ``[kafka.java]`` go to their client only, last, as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import SecretStr

from siding.config.fields import Problem, Setting
from siding.config.kafka_names import JAVA, LIBRDKAFKA

Client = Literal["librdkafka", "java"]
CLIENTS: tuple[Client, ...] = ("librdkafka", "java")
DESCRIBED: dict[Client, str] = {
    "librdkafka": "librdkafka (dispatch, DLQ tools, group commits)",
    "java": "Spark's Java client (source, sink)",
}
KNOWN: dict[Client, frozenset[str]] = {"librdkafka": LIBRDKAFKA, "java": JAVA}

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
SASL_PROTOCOLS = frozenset({"SASL_SSL", "SASL_PLAINTEXT"})
# librdkafka's names that siding turns into Java settings, and the Java settings it makes.
TRANSLATED = frozenset(
    {
        "sasl.username",
        "sasl.password",
        "sasl.mechanism",
        "sasl.mechanisms",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.endpoint.identification.algorithm",
    }
)
JAVA_PRODUCTS = {
    "sasl.jaas.config": ("sasl.username", "sasl.password"),
    "ssl.truststore.type": ("ssl.ca.location", "ssl.ca.pem"),
    "ssl.truststore.location": ("ssl.ca.location",),
    "ssl.truststore.certificates": ("ssl.ca.pem",),
}
# Same name in both clients, but each reads another syntax (OpenSSL vs IANA cipher names,
# librdkafka's assignor names vs Java class names).
DIFFERENT_VALUES = frozenset({"ssl.cipher.suites", "partition.assignment.strategy"})


@dataclass(frozen=True)
class Note:
    """A setting one of the clients will not get, or will read otherwise: ``key: message``."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


@dataclass(frozen=True)
class ClientSettings:
    """What each client gets (secrets stay ``SecretStr``) and what check-config reports."""

    librdkafka: Mapping[str, Setting]
    java: Mapping[str, Setting]
    notes: tuple[Note, ...]


def written_key(*parts: str) -> str:
    """``("java", "sasl.jaas.config")`` -> ``kafka.java."sasl.jaas.config"``, as errors say it."""
    return ".".join(["kafka", *parts[:-1], json.dumps(parts[-1])])


def reveal(value: Setting) -> str | int | float | bool:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def as_text(value: Setting) -> str:
    plain = reveal(value)
    return ("true" if plain else "false") if isinstance(plain, bool) else str(plain)


def split_settings(
    shared: Mapping[str, Setting],
    librdkafka: Mapping[str, Setting] | None = None,
    java: Mapping[str, Setting] | None = None,
    known: Mapping[Client, frozenset[str]] = KNOWN,
) -> ClientSettings:
    """The settings of each client; raises ``Problem`` (with the key) for what cannot work."""
    own: dict[Client, Mapping[str, Setting]] = {"librdkafka": librdkafka or {}, "java": java or {}}
    out: dict[Client, dict[str, Setting]] = {"librdkafka": {}, "java": {}}
    notes: list[Note] = []
    for name, value in shared.items():
        if name in TRANSLATED:
            continue
        knows = [client for client in CLIENTS if name in known[client]]
        for client in knows or CLIENTS:
            out[client][name] = value
        notes.extend(_shared_note(name, knows))
    translated = _translate(shared, own["java"])
    out["librdkafka"].update(translated["librdkafka"])
    out["java"].update(translated["java"])
    notes.extend(_sasl_unused(shared))
    for client in CLIENTS:
        for name, value in own[client].items():
            out[client][name] = value
            if name not in known[client]:
                notes.append(Note(written_key(client, name), _unknown_to(client)))
    return ClientSettings(out["librdkafka"], out["java"], tuple(notes))


def _unknown_to(client: Client) -> str:
    then = "refuses to start with it" if client == "librdkafka" else "ignores it"
    return f"{DESCRIBED[client]} does not know this setting and {then}"


def _shared_note(name: str, knows: list[Client]) -> list[Note]:
    key = written_key(name)
    if not knows:
        message = (
            "neither client knows this setting (a typo?); it is passed to both, and librdkafka"
            " refuses to start with it"
        )
        return [Note(key, message)]
    if len(knows) == 1:
        client = knows[0]
        other: Client = "java" if client == "librdkafka" else "librdkafka"
        message = (
            f"only {DESCRIBED[client]} knows this setting; {DESCRIBED[other]} does not get it"
            f" (move it to [kafka.{client}] to say so)"
        )
        return [Note(key, message)]
    if name in DIFFERENT_VALUES:
        message = (
            "both clients know this setting but read its value differently: give each client"
            " its own in [kafka.librdkafka] and [kafka.java]"
        )
        return [Note(key, message)]
    return []


def _translate(
    shared: Mapping[str, Setting], java_own: Mapping[str, Setting]
) -> dict[Client, dict[str, Setting]]:
    """librdkafka's SASL and CA settings, and what Spark's Java client gets for them."""
    lib: dict[str, Setting] = {k: v for k, v in shared.items() if k in TRANSLATED}
    java: dict[str, Setting] = {}
    for product, sources in JAVA_PRODUCTS.items():
        given = [s for s in sources if s in shared]
        if product in shared and given:
            raise Problem((product,), f"give either {' and '.join(sources)} or {product}, not both")
    if "sasl.mechanism" in shared and "sasl.mechanisms" in shared:
        raise Problem(("sasl.mechanisms",), "give sasl.mechanism or sasl.mechanisms, not both")
    mechanism = shared.get("sasl.mechanism", shared.get("sasl.mechanisms"))
    if mechanism is not None:
        java["sasl.mechanism"] = mechanism
    if "sasl.username" in shared or "sasl.password" in shared:
        jaas = _jaas(shared, mechanism, "sasl.jaas.config" in java_own)
        if jaas is not None:
            java["sasl.jaas.config"] = jaas
    if "ssl.ca.location" in shared and "ssl.ca.pem" in shared:
        raise Problem(("ssl.ca.pem",), "give ssl.ca.location or ssl.ca.pem, not both")
    location = shared.get("ssl.ca.location")
    if location is not None and as_text(location) != "probe":  # probe: the default CAs
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = location
    if "ssl.ca.pem" in shared:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.certificates"] = shared["ssl.ca.pem"]
    identification = shared.get("ssl.endpoint.identification.algorithm")
    if identification is not None:
        text = as_text(identification).strip().lower()
        lib["ssl.endpoint.identification.algorithm"] = text or "none"
        java["ssl.endpoint.identification.algorithm"] = "" if text == "none" else text
    return {"librdkafka": lib, "java": java}


def _jaas(shared: Mapping[str, Setting], mechanism: Setting | None, own: bool) -> SecretStr | None:
    """Spark's ``sasl.jaas.config`` for ``sasl.username`` and ``sasl.password``; ``None`` when
    ``[kafka.java]`` gives its own."""
    for name, other in (("sasl.username", "sasl.password"), ("sasl.password", "sasl.username")):
        if name not in shared:
            raise Problem((name,), f"required with {other}: give both")
    if own:
        return None
    module = LOGIN_MODULES.get(as_text(mechanism).upper()) if mechanism is not None else None
    if module is None:
        said = f"is {as_text(mechanism)}" if mechanism is not None else "is not set"
        raise Problem(
            ("sasl.username",),
            f"sasl.mechanism {said}: siding writes Spark's sasl.jaas.config for"
            f" {', '.join(LOGIN_MODULES)}; for another mechanism give sasl.jaas.config"
            " in [kafka.java]",
        )
    parts = {}
    for name in ("sasl.username", "sasl.password"):
        text = as_text(shared[name])
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
            raise Problem((name,), "holds a control character (a line break?), which cannot be")
        parts[name] = text.replace("\\", "\\\\").replace('"', '\\"')
    return SecretStr(
        f'{module} required username="{parts["sasl.username"]}"'
        f' password="{parts["sasl.password"]}";'
    )


def _sasl_unused(shared: Mapping[str, Setting]) -> list[Note]:
    sasl = sorted(name for name in shared if name.startswith("sasl."))
    protocol = as_text(shared.get("security.protocol", "PLAINTEXT")).upper()
    if not sasl or protocol in SASL_PROTOCOLS:
        return []
    message = (
        f"security.protocol is {protocol}: both clients ignore SASL settings unless it is"
        " SASL_SSL or SASL_PLAINTEXT"
    )
    return [Note(written_key(sasl[0]), message)]
