"""Fixtures for whole-pipeline tests: simulated consumer services and a route builder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from siding.devkit.sim_consumer import Behaviour, SimConsumerProcess, SimSettings
from tests.e2e.loops import LoopThread


@pytest.fixture
def sim_consumer(tmp_path: Path) -> Iterator[Callable[..., tuple[SimConsumerProcess, Path]]]:
    """Start ``siding sim consumer`` processes: ``sim, record_file = sim_consumer(**behaviour)``."""
    started: list[SimConsumerProcess] = []

    def start(transport: str = "grpc", **behaviour: Any) -> tuple[SimConsumerProcess, Path]:
        record = tmp_path / f"received-{len(started)}.csv"
        settings = SimSettings(
            transport=transport,  # type: ignore[arg-type]
            behaviour=Behaviour(**behaviour),
            record=str(record),
        )
        sim = SimConsumerProcess(settings).start()
        started.append(sim)
        return sim, record

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """An asyncio loop on its own thread, closed after the test."""
    loop = LoopThread()
    yield loop
    loop.close()
