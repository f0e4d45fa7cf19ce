"""The latency-aware adaptive limit (opt-in: ``adaptive.latency = true``) settles near a consumer's
knee instead of at max_in_flight (issue 27, item 3; docs/dispatch.md, "Adaptive concurrency").

The consumer is a webhook in this test that counts its own open calls and answers like a
queueing system: 20 ms while it holds at most 8 calls (its knee), 10 ms more for every call
above. Its count is sampled every 10 ms. What is measured is what the consumer feels from one
task per batch (one partition) over five micro-batches: the limit of the task's window, kept
by its Python worker from one batch to the next. A worker that runs the route for the first time
starts at max_in_flight (its first calls go out together) and descends, halving the window while
halving makes the fast answers faster, to measure the consumer's unloaded latency (a window that
started at the top and took its first answers for the baseline measured an already loaded
consumer and held 63 of 64 calls). Several tasks at once each steer with a baseline of their
own: docs/dispatch.md, "Adaptive concurrency".
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from siding.devkit.broker import EmbeddedKafka
from siding.devkit.harness import PipelineRun
from siding.devkit.sim_produce import produce
from siding.devkit.wait import wait_until
from siding.model import delivery_id
from tests.e2e.loops import LoopThread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BASE_S = 0.02
K_S = 0.01
KNEE = 8
SAMPLE_S = 0.01
MAX_IN_FLIGHT = 64
COUNT = 3000
# The descent from max_in_flight is over by then (about 2 s in the unit model).
SETTLED_S = 5.0


@dataclass
class KneeConsumer:
    """Latency = BASE_S + K_S x the calls open above KNEE (this one included)."""

    open: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)

    async def hook(self, request: web.Request) -> web.Response:
        await request.read()
        self.open += 1
        try:
            self.asked.append(request.headers["webhook-id"])
            await asyncio.sleep(BASE_S + K_S * max(0, self.open - KNEE))
            self.acked.add(request.headers["webhook-id"])
            return web.Response(status=204)
        finally:
            self.open -= 1

    async def sample(self) -> None:
        while True:
            self.samples.append((time.monotonic(), self.open))
            await asyncio.sleep(SAMPLE_S)


def serve(loop: LoopThread, consumer: KneeConsumer) -> tuple[str, Callable[[], None]]:
    app = web.Application()
    app.router.add_post("/hook", consumer.hook)
    runner = web.AppRunner(app)

    async def start() -> tuple[int, asyncio.Task[None]]:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1]), asyncio.create_task(consumer.sample())

    port, sampler = loop.run(start())

    async def stop() -> None:
        sampler.cancel()
        await runner.cleanup()

    return f"http://127.0.0.1:{port}/hook", lambda: loop.run(stop())


def test_the_limit_settles_near_the_consumers_knee(
    kafka: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    loop_thread: LoopThread,
) -> None:
    # Given 3,000 messages waiting, max_in_flight = 64, batches of 600, the latency limit on, and
    # the knee consumer (at 10 calls it answers in twice its unloaded 20 ms: the limit's target)
    topic = topic_name("knee")
    produce(kafka.bootstrap, topic, COUNT)
    ids = {delivery_id(topic, 0, o) for o in range(COUNT)}
    consumer = KneeConsumer()
    endpoint, stop = serve(loop_thread, consumer)
    route = {
        "name": topic[-80:],
        "topic": topic,
        "group": f"{topic}-group",
        "endpoint": endpoint,
        "max_in_flight": MAX_IN_FLIGHT,
        "deadline": "10s",
        "max_offsets_per_trigger": 600,
        "adaptive": {"latency": True},
    }
    try:
        # When the route delivers them
        with PipelineRun.from_route(
            kafka.bootstrap, route, checkpoint_dir=tmp_path / "ckpt", spark=spark
        ) as run:
            wait_until(
                lambda: consumer.acked >= ids,
                timeout_s=180,
                what="every message acknowledged",
                check=run.check,
            )
            run.wait_committed({0: COUNT}, timeout_s=60)
    finally:
        stop()
    # Then nothing was lost, and nothing asked twice
    assert set(consumer.asked) == ids
    assert len(consumer.asked) == COUNT
    busy = [(t, n) for t, n in consumer.samples if n > 0]
    first = busy[0][0]
    opening = max(n for t, n in busy if t < first + 1.0)
    settled = [n for t, n in busy if t >= first + SETTLED_S]
    median = statistics.median(settled)
    p90 = statistics.quantiles(settled, n=10)[-1]
    by_second: dict[int, list[int]] = {}
    for t, n in busy:
        by_second.setdefault(int(t - first), []).append(n)
    print(
        f"\nopen calls at the consumer: first second's peak {opening}; from {SETTLED_S:.0f} s on"
        f" median {median}, p90 {p90:.0f}, peak {max(settled)} (knee {KNEE}, target at"
        f" {KNEE + 2}, max_in_flight {MAX_IN_FLIGHT}); {len(settled)} samples over"
        f" {busy[-1][0] - first:.1f} s; median by second:"
        f" {[statistics.median(v) for _, v in sorted(by_second.items())]}"
    )
    # The demand was there (600 records a batch), and the first calls went out together: the
    # window starts at max_in_flight
    assert opening == MAX_IN_FLIGHT
    # And the limit brought the consumer back near its knee and held it there, batch after batch
    assert KNEE - 2 <= median <= 2 * KNEE
    assert p90 <= 3 * (KNEE + 2)
