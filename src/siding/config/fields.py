"""Field types shared by the settings models, and the error that carries its own key."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, SecretStr

from siding.config.values import format_duration, parse_duration


class Problem(ValueError):
    """A validation problem that knows its key, relative to the model that raises it."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def _duration_input(value: object) -> float:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"bare number {value!r} (ambiguous unit): write e.g. '{value}s'")
    raise ValueError("expected a duration string such as '10s'")


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be longer than 0s")
    return value


def _not_bool(value: object) -> object:
    if isinstance(value, bool):  # pydantic would read true as 1
        raise ValueError("expected a number, not true/false")
    return value


_AS_TEXT = PlainSerializer(format_duration, return_type=str, when_used="json")
Duration = Annotated[float, BeforeValidator(_duration_input), _AS_TEXT]
"""Seconds, written with a unit in TOML; never negative."""
PositiveDuration = Annotated[
    float, BeforeValidator(_duration_input), AfterValidator(_positive), _AS_TEXT
]
Count = Annotated[int, BeforeValidator(_not_bool)]
Number = Annotated[float, BeforeValidator(_not_bool)]
Setting = str | int | float | bool | SecretStr
"""A pass-through client setting; names that look secret hold a ``SecretStr``."""
