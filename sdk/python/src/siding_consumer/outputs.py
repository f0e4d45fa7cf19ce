"""Output records in JSON, for webhook answers (docs/outputs.md): both sides of the wire use
these two functions, the webhook app to write an answer and siding to read it.

    {"outputs": [{"topic": "orders.billed", "key_base64": "...", "value_base64": "...",
                  "headers": [{"key": "source", "value_base64": "..."}]}]}

``key_base64`` absent is no key; ``value_base64`` absent is a tombstone; ``headers`` may be left
out. Bytes travel as standard base64, so any value arrives byte for byte.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

from siding_consumer.errors import SidingError
from siding_consumer.model import Output


class OutputError(SidingError):
    """An answer's outputs cannot be read; the message names the bad output and field."""


def outputs_to_json(outputs: Iterable[Output]) -> list[dict[str, Any]]:
    """The ``outputs`` list of a webhook answer."""
    return [_output_to_json(output) for output in outputs]


def _output_to_json(output: Output) -> dict[str, Any]:
    data: dict[str, Any] = {"topic": output.topic}
    if output.key is not None:
        data["key_base64"] = _b64(output.key)
    if output.value is not None:
        data["value_base64"] = _b64(output.value)
    if output.headers:
        data["headers"] = [{"key": k, "value_base64": _b64(v)} for k, v in output.headers]
    return data


def outputs_from_json(value: object, where: str = "outputs") -> tuple[Output, ...]:
    """The ``outputs`` list of a webhook answer as ``Output``s; raises ``OutputError`` naming
    the bad entry and field (``where`` prefixes it, e.g. ``results[3].outputs``)."""
    if not isinstance(value, list):
        raise OutputError(f"{where} is not a list")
    return tuple(_output_from_json(item, f"{where}[{n}]") for n, item in enumerate(value))


def _output_from_json(item: object, where: str) -> Output:
    if not isinstance(item, Mapping):
        raise OutputError(f"{where} is not an object")
    topic = item.get("topic")
    if not isinstance(topic, str) or not topic:
        raise OutputError(f"{where}.topic is missing or not a string")
    headers = item.get("headers", [])
    if not isinstance(headers, list):
        raise OutputError(f"{where}.headers is not a list")
    return Output(
        topic=topic,
        key=_optional(item, "key_base64", where),
        value=_optional(item, "value_base64", where),
        headers=tuple(_header(h, f"{where}.headers[{n}]") for n, h in enumerate(headers)),
    )


def _header(header: object, where: str) -> tuple[str, bytes]:
    if not isinstance(header, Mapping) or not isinstance(header.get("key"), str):
        raise OutputError(f"{where} is not {{key, value_base64}}")
    return header["key"], _unb64(header.get("value_base64"), f"{where}.value_base64")


def _optional(item: Mapping[str, Any], name: str, where: str) -> bytes | None:
    if item.get(name) is None:
        return None
    return _unb64(item[name], f"{where}.{name}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise OutputError(f"{where} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise OutputError(f"{where} is not valid base64") from None
