"""Turn ``siding.toml`` text into a ``SidingConfig``, or a ``ConfigError`` that names the key.

Four steps: parse TOML; interpolate ``${VAR}`` in string values (after parsing, so quoting cannot
break); make relative paths absolute and read secret files; validate.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from siding.config.fields import Problem
from siding.config.models import SECRET_FILE_KEYS, RouteConfig, SidingConfig
from siding.config.sections import DEFAULT_CHECKPOINT_DIR, DEFAULT_CLUSTER, in_cluster
from siding.config.values import interpolate
from siding.errors import ConfigError
from siding.naming import is_safe_route_name

Loc = tuple[str | int, ...]
_TRIMMED_SECRETS = frozenset({"token", "webhook_secret"})  # files usually end with a newline


def load_config(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> SidingConfig:
    """Read and validate a ``siding.toml``; relative paths in it are relative to its folder."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read {file}: {exc}") from None
    return parse_config(text, env=env, source=str(file), base_dir=file.resolve().parent)


def parse_config(
    text: str,
    *,
    env: Mapping[str, str] | None = None,
    source: str = "<string>",
    base_dir: str | os.PathLike[str] | None = None,
) -> SidingConfig:
    """Validate TOML text. ``env`` defaults to ``os.environ``; relative paths are relative to
    ``base_dir`` (default: the working directory)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{source}: invalid TOML: {_toml_position(str(exc))}") from None
    environ = os.environ if env is None else env
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    try:
        data = _interpolate(raw, (), environ)
        _load_files(data, base)
        return SidingConfig.model_validate(data)
    except Problem as exc:
        raise ConfigError(_key(exc.loc, raw), exc.message) from None
    except ValidationError as exc:
        raise _translate(exc, raw) from None


# Step 1 of ``parse_route`` validates the table alone inside a config that needs nothing else.
_PLACEHOLDER_KAFKA = {"bootstrap": "127.0.0.1:9092"}


def parse_route(
    table: Mapping[str, Any],
    existing: Sequence[RouteConfig] = (),
    clusters: Sequence[str] = (),
) -> RouteConfig:
    """One route from the keys of a ``[[route]]`` table given as data (the control API's
    ``POST /routes``), validated by the same code as a file, with the same error keys
    (``route[<name>].<key>``), then against the ``existing`` routes (names, topic and group).

    Nothing is read from the driver's environment or files: no ``${VAR}``, no ``*_file`` keys
    (a route made through the API gives its secrets inline). ``clusters``: the names a route's
    ``cluster`` and ``write_cluster`` may take (``[kafka]``'s ``default`` always)."""
    data = dict(table)
    kafka = {
        **_PLACEHOLDER_KAFKA,
        "clusters": {n: _PLACEHOLDER_KAFKA for n in clusters if n != DEFAULT_CLUSTER},
    }
    raw = {"route": [data]}
    try:
        auth = data.get("auth")
        for file_key in SECRET_FILE_KEYS.values():
            if isinstance(auth, Mapping) and file_key in auth:
                raise Problem(
                    ("route", 0, "auth", file_key),
                    "files are not read for a route made through the control API: give"
                    f" {_inline(file_key)} itself",
                )
        route = SidingConfig.model_validate({"kafka": kafka, "route": [data]}).route[0]
        named = [*({"name": r.name} for r in existing), {"name": route.name}]
        raw = {"route": named}
        SidingConfig.model_validate({"kafka": kafka, "route": [*existing, route]})
    except Problem as exc:
        raise ConfigError(_key(exc.loc, raw), exc.message) from None
    except ValidationError as exc:
        raise _translate(exc, raw) from None
    return route


def _inline(file_key: str) -> str:
    return next(inline for inline, key in SECRET_FILE_KEYS.items() if key == file_key)


def _toml_position(message: str) -> str:
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if match is None:
        return message
    return f"line {match.group(1)}, column {match.group(2)}: {message[: match.start()]}"


def _interpolate(value: Any, loc: Loc, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        try:
            return interpolate(value, env)
        except ValueError as exc:
            raise Problem(loc, str(exc)) from None
    if isinstance(value, Mapping):
        return {k: _interpolate(v, (*loc, k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, (*loc, i), env) for i, v in enumerate(value)]
    return value


def _load_files(data: dict[str, Any], base: Path) -> None:
    """Make relative paths absolute and read secret files into their inline keys, in place.

    Shapes that are wrong are left alone: validation reports them with their key.
    """
    spark = data.setdefault("spark", {})
    if isinstance(spark, dict):
        path = spark.get("checkpoint_dir", DEFAULT_CHECKPOINT_DIR)
        if isinstance(path, str):
            spark["checkpoint_dir"] = _resolve_dir(path, base)
        if isinstance(jars := spark.get("jars_dir"), str):
            spark["jars_dir"] = str((base / Path(jars).expanduser()).resolve())
    routes = data.get("route")
    for i, route in enumerate(routes if isinstance(routes, list) else []):
        auth = route.get("auth") if isinstance(route, dict) else None
        if isinstance(auth, dict):
            _read_secret_files(auth, base, ("route", i, "auth"))
        page = route.get("dlq_page") if isinstance(route, dict) else None
        if isinstance(page, dict):
            _read_secret_file(page, "secret", base, ("route", i, "dlq_page"))


def _read_secret_files(auth: dict[str, Any], base: Path, loc: Loc) -> None:
    for empty in [key for key, value in auth.items() if value == ""]:
        del auth[empty]  # "${TOKEN:-}" means "no token"
    for inline, file_key in SECRET_FILE_KEYS.items():
        _read_secret_file(auth, inline, base, loc, file_key, trim=inline in _TRIMMED_SECRETS)


def _read_secret_file(
    table: dict[str, Any],
    inline: str,
    base: Path,
    loc: Loc,
    file_key: str | None = None,
    *,
    trim: bool = True,
) -> None:
    """``file_key`` (``<inline>_file``) read into ``inline`` (surrounding whitespace removed
    unless ``trim`` is off)."""
    file_key = file_key or f"{inline}_file"
    path = table.get(file_key)
    if not isinstance(path, str):
        return
    if inline in table:
        raise Problem((*loc, file_key), f"give either {inline} or {file_key}, not both")
    resolved = base / path
    try:
        content = resolved.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Problem((*loc, file_key), f"cannot read {resolved}: {exc}") from None
    table[file_key] = str(resolved)
    table[inline] = content.strip() if trim else content


def _resolve_dir(path: str, base: Path) -> str:
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", path):
        return path  # hdfs://, s3a://, file:/ ... mean the same from everywhere
    return str((base / path).resolve())


# -- error keys ----------------------------------------------------------------------------------


def _translate(exc: ValidationError, raw: Mapping[str, Any]) -> ConfigError:
    errors = exc.errors()
    first = errors[0]
    loc: Loc = tuple(first["loc"])
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, Problem):
        loc, message = loc + cause.loc, cause.message
    elif first["type"] == "extra_forbidden":
        message = "unknown key" + _suggest(loc)
    elif first["type"] == "missing":
        message = "required key is missing"
    elif isinstance(cause, ValueError):
        message = str(cause)
    elif loc == ("route",) and first["type"] == "tuple_type":
        message = "write each route as a [[route]] table"
    else:
        message = _plain(first["type"], first.get("ctx") or {}) or first["msg"]
    if loc[:2] == ("kafka", "clusters") and len(loc) > 2:
        message = in_cluster(message, str(loc[2]))
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(_key(_as_written(loc, raw), raw), message)


def _plain(kind: str, ctx: Mapping[str, Any]) -> str | None:
    """Pydantic's wording for limits, said the way the rest of the messages are."""
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "too_long":
        return f"at most {ctx['max_length']} entries allowed, got {ctx.get('actual_length')}"
    if kind == "tuple_type":
        return "expected a list"
    if kind == "model_type":
        return "expected a table"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters"
    return None


def _as_written(loc: Loc, raw: Mapping[str, Any]) -> Loc:
    """Point at ``ca_file`` rather than ``ca_pem`` when the user gave the secret as a file."""
    if not loc or loc[-1] not in SECRET_FILE_KEYS:
        return loc
    table: Any = raw
    for part in loc[:-1]:
        try:
            table = table[part]
        except (KeyError, IndexError, TypeError):
            return loc
    file_key = SECRET_FILE_KEYS[str(loc[-1])]
    return (*loc[:-1], file_key) if isinstance(table, dict) and file_key in table else loc


def _suggest(loc: Loc) -> str:
    model: type[BaseModel] | None = SidingConfig
    for part in loc[:-1]:
        if isinstance(part, str) and model is not None:
            field = model.model_fields.get(part)
            model = _model_in(field.annotation) if field is not None else None
    if model is None or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _key(loc: Loc, raw: Mapping[str, Any]) -> str:
    """``("route", 0, "lanes", 1, "delay")`` -> ``route[billing].lanes[1].delay``."""
    out = ""
    for n, part in enumerate(loc):
        if isinstance(part, int):
            label = _route_label(raw, part) if n == 1 and loc[0] == "route" else str(part)
            out += f"[{label}]"
        else:
            name = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += f".{name}" if out else name
    return out


def _route_label(raw: Mapping[str, Any], index: int) -> str:
    """A route is named by its ``name`` when it has a literal one, else by its index."""
    routes = raw.get("route")
    if isinstance(routes, list) and index < len(routes) and isinstance(routes[index], dict):
        name = routes[index].get("name")
        if isinstance(name, str) and is_safe_route_name(name):
            return name
    return str(index)
