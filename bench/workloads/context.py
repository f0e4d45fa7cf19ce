"""What every workload shares: the broker, the SparkSession, a scratch folder, the scale, and
helpers to start a simulated consumer and run siding's pipeline over a topic."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from siding.devkit.harness import PipelineRun
from siding.devkit.sim_consumer import Behaviour, SimConsumerProcess, SimSettings
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCALE_ENV = "SIDING_BENCH_SCALE"
Transport = Literal["grpc", "http"]


def scale_from_env(env: Mapping[str, str] = os.environ) -> float:
    value = float(env.get(SCALE_ENV, "1") or 1)
    if value <= 0:
        raise ValueError(f"{SCALE_ENV} must be positive, got {value}")
    return value


def scaled(count: int, scale: float, floor: int = 10) -> int:
    """``count`` times the run's scale, never below ``floor``."""
    return max(floor, round(count * scale))


@dataclass
class BenchContext:
    bootstrap: str
    spark: SparkSession
    workdir: Path
    scale: float = 1.0
    master: str = "local[2]"

    def topic(self, label: str) -> str:
        return f"bench-{label}-{uuid.uuid4().hex[:8]}"

    def create_topic(self, topic: str) -> None:
        ensure_topics(admin_client({"bootstrap.servers": self.bootstrap}), [TopicSpec(topic, 1)])

    def record_file(self, label: str) -> Path:
        return self.workdir / f"{label}-{uuid.uuid4().hex[:6]}.csv"

    @contextlib.contextmanager
    def sim(
        self, behaviour: Behaviour, record: Path, transport: Transport = "grpc"
    ) -> Iterator[SimConsumerProcess]:
        """A simulated consumer (gRPC or HTTP) in its own process, recording every delivery.
        Over HTTP it answers as the SDKs' webhook servers do (``reads_batches``: it says
        ``siding-batch: v1``, so siding's HTTP defaults send it batches and it streams their
        results); a peer that pushes single webhooks is answered as before."""
        settings = SimSettings(
            transport=transport, behaviour=behaviour, record=str(record), reads_batches=True
        )
        with SimConsumerProcess(settings) as sim:
            yield sim

    def pipeline(self, topic: str, target: str, **route: object) -> PipelineRun:
        """siding's real pipeline over ``topic``, pushing to the gRPC consumer at ``target``;
        a new route (group, checkpoints) every time, so topics can be read again."""
        return self.route_run(topic, target, route)

    def route_run(
        self,
        topic: str,
        target: str,
        route: Mapping[str, object] | None,
        transport: Transport = "grpc",
    ) -> PipelineRun:
        """Like ``pipeline``, to the consumer at ``target`` (``host:port``) over ``transport``.

        ``route=None`` is the defaults: a route with only name, topic, group and endpoint, and
        the config's default trigger, as a new user would start.
        """
        name = f"{topic.removeprefix('bench-')}-{uuid.uuid4().hex[:4]}"
        endpoint = f"grpc://{target}" if transport == "grpc" else f"http://{target}/"
        settings: dict[str, object] = {
            "name": name,
            "topic": topic,
            "group": f"{name}-group",
            "endpoint": endpoint,
        }
        if route is not None:
            settings["dlq_flood_min_batch"] = 1_000_000
            settings.update(route)
        return PipelineRun.from_route(
            self.bootstrap,
            settings,
            checkpoint_dir=self.workdir / f"checkpoints-{name}",
            spark=self.spark,
            master=self.master,
            trigger=None,  # the config's default (0s): batches back to back
        )


def timed_wait_committed(run: PipelineRun, count: int, timeout_s: float) -> float:
    """Wait until the route's group committed all ``count`` records; seconds it took."""
    started = time.monotonic()
    run.wait_committed({0: count}, timeout_s=timeout_s)
    return time.monotonic() - started
