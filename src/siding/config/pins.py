"""Pure: a route pinned to partitions (``partitions = [0, 1, 5]``): the key's shape, what the
route reads, and whether two routes of one group read a partition twice (docs/configuration.md,
"A route pinned to partitions")."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from siding.config.fields import Problem

# Kafka's partition numbers are int32.
MAX_PARTITION = 2**31 - 1

PinsGiven = tuple[int, ...] | dict[str, tuple[int, ...]]
"""``partitions`` as given: a list (a ``topic`` route) or a table topic -> list (``topics``)."""


def parse_partition_list(value: Any) -> tuple[int, ...]:
    """A non-empty list of distinct partition numbers, sorted; ``Problem`` names the bad item
    (relative to the list)."""
    if not isinstance(value, list | tuple) or not value:
        raise Problem((), "expected a non-empty list of partition numbers, e.g. [0, 1, 5]")
    for i, p in enumerate(value):
        if isinstance(p, bool) or not isinstance(p, int):
            raise Problem((i,), f"{p!r} is not a partition number (expected an integer)")
        if not 0 <= p <= MAX_PARTITION:
            raise Problem((i,), f"{p} is not a partition number (0 or more)")
        if p in value[:i]:
            raise Problem((i,), f"partition {p} is listed twice")
    return tuple(sorted(value))


def parse_pins(value: Any) -> PinsGiven | None:
    """``partitions`` as given in the file: a list, or a table of lists by topic."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            raise Problem((), "expected a table of partition lists by topic, e.g. { orders = [0] }")
        out: dict[str, tuple[int, ...]] = {}
        for topic, partitions in value.items():
            try:
                out[str(topic)] = parse_partition_list(partitions)
            except Problem as exc:
                raise Problem((str(topic), *exc.loc), exc.message) from None
        return out
    return parse_partition_list(value)


def pins_problem(
    given: PinsGiven, *, topic: str | None, topics: tuple[str, ...], pattern: str | None
) -> Problem | None:
    """Whether ``partitions`` fits the route's source (``topic``, ``topics`` or a pattern);
    the problem, relative to the route, or ``None``."""
    if pattern is not None:
        return Problem(
            ("partitions",),
            "a route with topic_pattern reads the partitions of topics as they appear and"
            " cannot be pinned: name its topics (topic or topics) to pin partitions",
        )
    if topic is not None:
        if isinstance(given, dict):
            return Problem(
                ("partitions",),
                f"a route with one topic takes a list, e.g. partitions = [0, 1, 5] (of {topic!r})",
            )
        return None
    if not isinstance(given, dict):
        return Problem(
            ("partitions",),
            "a route with topics pins each topic's partitions: give a table, e.g."
            f" partitions = {{ {topics[0]} = [0, 1] }} naming every topic",
        )
    for name in given:
        if name not in topics:
            return Problem(("partitions", name), f"{name!r} is not one of the route's topics")
    for name in topics:
        if name not in given:
            return Problem(
                ("partitions",),
                f"names no partitions of topic {name!r}: a pinned route pins every topic it"
                " reads (list all of a topic's partitions to read it whole)",
            )
    return None


def pins_of(given: PinsGiven | None, topic: str | None) -> dict[str, tuple[int, ...]]:
    """Topic -> its pinned partitions (sorted); empty for a route that is not pinned."""
    if given is None:
        return {}
    if isinstance(given, dict):
        return dict(given)
    return {topic: given} if topic is not None else {}


def assign_option(pins: Mapping[str, Iterable[int]]) -> str:
    """Spark's Kafka source ``assign`` option: ``{"orders": [0, 1, 5]}``."""
    return json.dumps({topic: sorted(parts) for topic, parts in pins.items()})


def shared_partitions(
    one: tuple[int, ...] | None, two: tuple[int, ...] | None
) -> tuple[int, ...] | None:
    """Pure: the partitions of one topic two routes of one group would both read; ``None``
    means every partition (neither is pinned), ``()`` none (their pins are disjoint)."""
    if one is None:
        return two
    if two is None:
        return one
    return tuple(sorted(set(one) & set(two)))


def overlap_message(
    first: tuple[str, tuple[int, ...] | None],
    second: tuple[str, tuple[int, ...] | None],
    topic: str,
    group: str,
) -> str:
    """Why two routes of ``group`` may not both run: each is (name, pin or ``None``)."""
    (one, one_pin), (two, two_pin) = first, second
    shared = shared_partitions(one_pin, two_pin) or ()
    parts = ", ".join(str(p) for p in shared)
    if one_pin is None or two_pin is None:
        whole, pinned = (one, two) if one_pin is None else (two, one)
        return (
            f"route {whole!r} reads every partition of topic {topic!r} in group {group!r},"
            f" route {pinned!r} pins partition(s) {parts} of it: both would commit them (pin"
            " both routes to disjoint partitions, or give them different groups)"
        )
    return (
        f"routes {one!r} and {two!r} both pin partition(s) {parts} of topic {topic!r} in group"
        f" {group!r}: the pins of one group must not overlap"
    )


def describe_pins(pins: Mapping[str, tuple[int, ...]]) -> str:
    """``orders[0,2]`` or ``a[0],b[1,2]``: a pinned source for people (and a checkpoint's
    owner file)."""
    return ",".join(f"{t}[{','.join(str(p) for p in parts)}]" for t, parts in pins.items())


def missing_partitions(
    pins: Mapping[str, tuple[int, ...]], present: Mapping[str, int]
) -> list[tuple[str, int, int]]:
    """(topic, partition, the topic's partition count) of every pinned partition that does not
    exist on its topic (topics that do not exist are another check's)."""
    return [
        (topic, p, present[topic])
        for topic, parts in pins.items()
        if topic in present
        for p in parts
        if p >= present[topic]
    ]
