"""Run the real pipeline in-process against a real broker: for tests, the demo and benchmarks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from siding import naming
from siding.config import SidingConfig, parse_config
from siding.devkit.wait import wait_until
from siding.kafka.admin import committed_offsets
from siding.kafka.reader import read_records
from siding.pipeline.driver.app import Application
from siding.pipeline.driver.batch import BatchSink
from siding.pipeline.executor.result import TaskResult
from siding.routing import story
from siding.steps import StepCounts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def toml_value(value: object) -> str:
    """A Python value as a TOML inline value (enough for siding configs)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def config_text(
    bootstrap: str,
    route: Mapping[str, object],
    *,
    checkpoint_dir: str | Path,
    master: str = "local[2]",
    trigger: str | None = "200ms",
    kafka_client: Mapping[str, object] | None = None,
) -> str:
    """A siding.toml for one route; ``trigger=None`` leaves the trigger at the config's default."""
    lines = ["[kafka]", f"bootstrap = {toml_value(bootstrap)}"]
    lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in (kafka_client or {}).items()]
    lines += [
        "[spark]",
        f"master = {toml_value(master)}",
        f"checkpoint_dir = {toml_value(str(checkpoint_dir))}",
    ]
    if trigger is not None:
        lines.append(f"trigger = {toml_value(trigger)}")
    lines += ["[control]", 'listen = ""', "[[route]]"]
    tables = {k: v for k, v in route.items() if isinstance(v, Mapping)}
    lines += [f"{k} = {toml_value(v)}" for k, v in route.items() if k not in tables]
    for name, table in tables.items():
        lines.append(f"[route.{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    story: story.StoryHeaders | None


@dataclass
class Totals:
    """What the batches reported, summed (thread-safe)."""

    counts: StepCounts = field(default_factory=StepCounts)
    batches: int = 0
    hosts: set[tuple[str, int]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, _route: str, _lane: int, results: list[TaskResult], _seconds: float) -> None:
        with self.lock:
            self.batches += 1
            self.counts += StepCounts.total(r.counts for r in results)
            self.hosts.update((r.host, r.pid) for r in results if r.counts.records)


ResultCallback = Callable[[str, int, list[TaskResult], float], None]


def _both(first: ResultCallback, second: ResultCallback) -> ResultCallback:
    def call(route: str, lane: int, results: list[TaskResult], seconds: float) -> None:
        first(route, lane, results, seconds)
        second(route, lane, results, seconds)

    return call


class PipelineRun:
    """``with PipelineRun(config) as run:`` — the Application runs on a background thread."""

    def __init__(
        self,
        config: SidingConfig,
        spark: SparkSession | None = None,
        also: ResultCallback | None = None,
    ) -> None:
        self.config = config
        self.totals = Totals()
        on_result: ResultCallback = self.totals.add
        if also is not None:
            on_result = _both(self.totals.add, also)
        self.app = Application(config, sink=BatchSink(on_result), spark=spark)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @classmethod
    def from_route(
        cls,
        bootstrap: str,
        route: Mapping[str, object],
        *,
        checkpoint_dir: str | Path,
        spark: SparkSession | None = None,
        kafka_client: Mapping[str, object] | None = None,
        master: str = "local[2]",
        trigger: str | None = "200ms",
        also: ResultCallback | None = None,
    ) -> PipelineRun:
        """A run of one route; ``trigger=None`` keeps the config's default trigger."""
        text = config_text(
            bootstrap,
            route,
            checkpoint_dir=checkpoint_dir,
            kafka_client=kafka_client,
            master=master,
            trigger=trigger,
        )
        return cls(parse_config(text), spark, also)

    @property
    def route(self) -> Any:
        return self.config.route[0]

    @property
    def client_conf(self) -> dict[str, Any]:
        """The settings of the cluster the route reads."""
        return dict(self.config.kafka.cluster_for(self.route, "source").client_config())

    @property
    def write_conf(self) -> dict[str, Any]:
        """The settings of the cluster of the route's lanes and DLQ."""
        return dict(self.config.kafka.cluster_for(self.route, "write").client_config())

    def __enter__(self) -> PipelineRun:
        self.app.start()
        self._thread = threading.Thread(target=self._run, name="siding-app", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.app.run()
        except BaseException as exc:
            self.error = exc

    def check(self) -> None:
        """Raise the application's error, if it stopped with one (use as ``wait_until(check=)``)."""
        if self.error is not None:
            raise AssertionError(f"pipeline failed: {self.error}") from self.error

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.app.stop()
        if self._thread is not None:
            self._thread.join(30)

    def committed(self, topic: str | None = None) -> dict[int, int]:
        source = topic or self.route.single_topic
        if source is None:
            raise ValueError(f"route {self.route.name} reads several topics: name one")
        return committed_offsets(self.client_conf, self.route.group, source)

    def wait_committed(self, offsets: Mapping[int, int], timeout_s: float = 120.0) -> None:
        """Until the route's group has committed at least ``offsets`` on the source topic."""

        def reached() -> bool:
            got = self.committed()
            return all(got.get(p, -1) >= o for p, o in offsets.items())

        wait_until(
            reached, timeout_s=timeout_s, what=f"group offsets {dict(offsets)}", check=self.check
        )

    def dead_letters(self) -> list[DeadLetter]:
        return self.read_lane_topic(naming.route_dlq(self.route))

    def read_lane_topic(self, topic: str) -> list[DeadLetter]:
        return [
            DeadLetter(r.key, r.value, r.headers, story.decode(r.headers))
            for r in read_records(self.write_conf, topic)
        ]
