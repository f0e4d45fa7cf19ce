"""A standby keeps its Python workers warm for as long as it waits (Spark stops a worker idle
for a minute, so one warm-up at the start of a long wait would be lost)."""

from __future__ import annotations

import threading
import time

from siding.pipeline.driver.warm import WARM_EVERY_S, kept_warm


def test_it_warms_at_once_then_again_while_the_wait_lasts_and_never_after() -> None:
    calls: list[float] = []
    lock = threading.Lock()

    def warm() -> None:
        with lock:
            calls.append(time.monotonic())

    with kept_warm(warm, every_s=0.05):
        assert len(calls) == 1  # before the wait begins
        time.sleep(0.4)
    during = len(calls)
    time.sleep(0.2)
    assert during >= 4, calls  # again and again while it waited
    assert len(calls) == during  # and not once it stopped waiting


def test_workers_are_warmed_again_before_spark_stops_them_idle() -> None:
    # Spark 4.2 stops a Python worker idle for 60 s, checked every 10 s
    assert WARM_EVERY_S + 10 < 60
