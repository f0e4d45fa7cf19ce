"""``siding demo``: Uber's billing example end to end on this machine, with a live view.

Starts the embedded Kafka broker and a simulated consumer service, produces at a steady rate,
runs the real pipeline in-process, then prints a summary and the dead letters and stops
everything it started.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.live import Live

from siding.config import ControlConfig, SidingConfig, parse_config
from siding.control import ControlServer, application_health
from siding.devkit.broker import EmbeddedKafka
from siding.devkit.demo_view import (
    INTRO,
    ViewState,
    backlog,
    dead_lettered,
    delivered,
    live_view,
    plain_line,
    serial_estimate,
    summary_lines,
)
from siding.devkit.harness import config_text
from siding.devkit.sim_consumer import Behaviour, SimConsumerProcess, SimSettings, plan
from siding.devkit.sim_produce import message_headers, message_value
from siding.kafka.admin import TopicSpec, admin_client, ensure_topics
from siding.model import delivery_id
from siding.pipeline.driver.app import Application
from siding.pipeline.driver.metrics import MetricsSink

TOPIC = "demo.billing-events"
ROUTE = "billing"
# Uber's billing example: a fast provider, a slow one for 10 %, 1 % poison pills.
BEHAVIOUR = Behaviour(
    latency_s=(0.005, 0.015), slow_ratio=0.10, slow_latency_s=2.0, dead_ratio=0.01
)
MAX_IN_FLIGHT = 200
WARM_UP = 50
WARM_UP_TIMEOUT_S = 120.0
DEADLINE_S = 1.0
LANES = ({"delay": "1s", "deadline": "5s"}, {"delay": "5s", "deadline": "5s"})


@dataclass(frozen=True, slots=True)
class DemoSettings:
    duration_s: float = 60.0
    rate: float = 300.0
    drain_s: float = 20.0
    live: bool | None = None  # None: live view when stdout is a terminal
    plain_every_s: float = 5.0
    dead_letters_shown: int = 10


@dataclass(frozen=True, slots=True)
class DemoResult:
    produced: int
    delivered: int
    dead_lettered: int
    drained: bool
    interrupted: bool


def route_table(endpoint: str) -> dict[str, object]:
    return {
        "name": ROUTE,
        "topic": TOPIC,
        "group": "billing",
        "endpoint": endpoint,
        "max_in_flight": MAX_IN_FLIGHT,
        "deadline": f"{DEADLINE_S:g}s",
        "lanes": [dict(lane) for lane in LANES],
        "min_partitions": 2,
    }


def demo_config(bootstrap: str, endpoint: str, checkpoint_dir: str) -> SidingConfig:
    text = config_text(
        bootstrap, route_table(endpoint), checkpoint_dir=checkpoint_dir, master="local[*]"
    )
    config = parse_config(text)
    # The demo serves its own control API, on any free port.
    return config.model_copy(update={"control": ControlConfig(listen="127.0.0.1:0")})


class SteadyProducer:
    """Produces ``rate`` msgs/s on a thread until ``total`` or ``stop``; ``produced`` counts
    what Kafka acknowledged."""

    def __init__(
        self, bootstrap: str, topic: str, rate: float, total: int, start_seq: int = 0
    ) -> None:
        self._bootstrap, self._topic, self._rate, self._total = bootstrap, topic, rate, total
        self._start_seq = start_seq
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self._lock = threading.Lock()
        self._acked = 0
        self.sent = 0
        self.done = False
        self.failures: list[str] = []

    @property
    def produced(self) -> int:
        with self._lock:
            return self._acked

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _on_delivery(self, error: Any, _message: Any) -> None:
        with self._lock:
            if error is None:
                self._acked += 1
            else:
                self.failures.append(str(error))

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self._bootstrap, "acks": "all", "enable.idempotence": True,
             "linger.ms": 5}
        )  # fmt: skip
        start = time.monotonic()
        for index in range(self._total):
            seq = self._start_seq + index
            wait = start + index / self._rate - time.monotonic()
            if wait > 0:
                producer.poll(wait)
            if self._stop.is_set():
                break
            headers: list[tuple[str, str | bytes | None]] = list(message_headers(seq, time.time()))
            producer.produce(
                self._topic,
                value=message_value(seq),
                headers=headers,
                on_delivery=self._on_delivery,
            )
            self.sent = index + 1
            producer.poll(0)
        producer.flush(30)
        self.done = True

    def join(self) -> None:
        """Wait until every message was sent and flushed."""
        if self._thread.is_alive():
            self._thread.join()

    def stop(self) -> None:
        self._stop.set()
        self.join()


def run_demo(settings: DemoSettings, stop: threading.Event, console: Console) -> DemoResult:
    """Run the whole demo; ``stop`` (Ctrl-C) ends it early but still cleans up."""
    console.print(
        INTRO.format(
            rate=settings.rate,
            slow=BEHAVIOUR.slow_ratio,
            dead=BEHAVIOUR.dead_ratio,
            window=MAX_IN_FLIGHT,
            deadline=DEADLINE_S,
            duration=settings.duration_s,
        ),
        highlight=False,
    )
    console.print()
    with ExitStack() as cleanup:
        parts = _start(console, cleanup)
        result = _observe(settings, stop, console, cleanup, parts)
        console.print("stopping Spark, the consumer service and the broker…", highlight=False)
    console.print("demo stopped cleanly" + (" (interrupted)" if result.interrupted else ""))
    return result


@dataclass(frozen=True, slots=True)
class _Parts:
    broker: EmbeddedKafka
    app: Application
    metrics: MetricsSink
    failure: list[BaseException]


def _start(console: Console, cleanup: ExitStack) -> _Parts:
    """Start broker, consumer service, control API and pipeline; ``cleanup`` stops them."""
    checkpoints = tempfile.mkdtemp(prefix="siding-demo-")
    cleanup.callback(shutil.rmtree, checkpoints, True)
    step(console, "starting the Kafka broker (embedded, KRaft)")
    broker = EmbeddedKafka()
    cleanup.callback(broker.stop)
    broker.start()
    step(console, f"  Kafka broker pid {broker.pid} on {broker.bootstrap}")
    sim = SimConsumerProcess(SimSettings(behaviour=BEHAVIOUR))
    cleanup.callback(sim.stop)
    sim.start()
    step(console, f"  consumer service (gRPC, simulated) on {sim.target}")
    ensure_topics(admin_client({"bootstrap.servers": broker.bootstrap}), [TopicSpec(TOPIC, 1)])
    config = demo_config(broker.bootstrap, f"grpc://{sim.target}", checkpoints)
    metrics = MetricsSink()
    metrics.declare(ROUTE, 1 + len(LANES))
    app = Application(config, sink=metrics.sink)
    cleanup.callback(app.stop)
    address = config.control.address()
    assert address is not None
    control = ControlServer(address, metrics, lambda: application_health(app))
    cleanup.callback(control.stop)
    control.start()
    step(
        console,
        "starting the pipeline (Spark local[*]: one streaming query and task slot per lane)",
    )
    app.start()
    step(console, f"  control API on {control.url}/status (also /health, /metrics)")
    failure: list[BaseException] = []
    threading.Thread(target=_run_app, args=(app, failure), daemon=True).start()
    return _Parts(broker, app, metrics, failure)


def _observe(
    settings: DemoSettings,
    stop: threading.Event,
    console: Console,
    cleanup: ExitStack,
    parts: _Parts,
) -> DemoResult:
    """Produce for the run's duration while showing progress, let the lanes catch up, then
    print the summary and the dead letters."""
    warm = _warm_up(console, stop, parts)
    total = int(settings.rate * settings.duration_s)
    producer = SteadyProducer(parts.broker.bootstrap, TOPIC, settings.rate, total, warm)
    cleanup.callback(producer.stop)
    producer.start()
    started = time.monotonic()

    caught_up: list[float] = []  # when the main lane had settled everything produced

    def state(phase: str) -> ViewState:
        view = ViewState(
            parts.metrics.snapshot(),
            ROUTE,
            1 + len(LANES),
            time.monotonic() - started,
            settings.duration_s,
            warm + producer.produced,
            phase,
        )
        if backlog(view) == 0 and not caught_up and producer.done:
            caught_up.append(view.elapsed_s)
        return view

    def running() -> bool:
        return not stop.is_set() and not parts.failure

    live = console.is_terminal if settings.live is None else settings.live
    show = _watch(console, live, state, settings.plain_every_s)
    show("running", lambda: running() and time.monotonic() - started < settings.duration_s)
    run_s = time.monotonic() - started
    producer.stop()
    drain_until = time.monotonic() + settings.drain_s
    show(
        "catching up",
        lambda: running() and not _drained(state("")) and time.monotonic() < drain_until,
    )
    final = state("done")
    if parts.failure:
        console.print(f"[red]the pipeline stopped: {parts.failure[0]}[/red]")
    produced = final.produced
    timed = range(warm, produced)
    delays = [plan(BEHAVIOUR, delivery_id(TOPIC, 0, i), 1).delay_s for i in timed]
    arrivals = [(i - warm) / settings.rate for i in timed]
    serial = serial_estimate(delays, arrivals, run_s)
    main_s = caught_up[0] if caught_up else final.elapsed_s
    for line in summary_lines(final, serial, run_s, main_s, _drained(final)):
        console.print(line, highlight=False)
    console.print()
    if not stop.is_set():
        _print_dead_letters(console, parts.app, settings)
    return DemoResult(
        produced, delivered(final), dead_lettered(final), _drained(final), stop.is_set()
    )


def _warm_up(console: Console, stop: threading.Event, parts: _Parts) -> int:
    """Send a few messages and wait for their batch: Spark's first batch starts its Python
    workers and takes seconds, which would otherwise look like siding's latency."""
    step(console, f"warming up: {WARM_UP} messages through the first batch")
    producer = SteadyProducer(parts.broker.bootstrap, TOPIC, 1000.0, WARM_UP).start()
    producer.join()
    deadline = time.monotonic() + WARM_UP_TIMEOUT_S
    while not stop.is_set() and not parts.failure and time.monotonic() < deadline:
        if parts.metrics.snapshot().lanes[(ROUTE, 0)].counts.records >= WARM_UP:
            break
        stop.wait(0.2)
    return WARM_UP


def step(console: Console, text: str) -> None:
    console.print(text, highlight=False)


def _run_app(app: Application, failure: list[BaseException]) -> None:
    try:
        app.run()
    except BaseException as exc:
        failure.append(exc)


def _drained(state: ViewState) -> bool:
    """The main lane settled everything produced and each retry lane what was sent to it."""
    lanes = [state.snapshot.lanes.get((state.route, k)) for k in range(state.lanes)]
    if any(m is None for m in lanes) or not state.produced:
        return False
    settled = [m.counts.records for m in lanes if m is not None]
    sent_on = [m.counts.to_lane for m in lanes if m is not None]
    return settled[0] >= state.produced and all(
        settled[k] >= sent_on[k - 1] for k in range(1, len(settled))
    )


def _watch(
    console: Console, live: bool, state: Callable[[str], ViewState], plain_every_s: float
) -> Callable[[str, Callable[[], bool]], None]:
    """A function that shows progress while ``keep_going()`` holds."""

    def show(phase: str, keep_going: Callable[[], bool]) -> None:
        if live:
            with Live(live_view(state(phase)), console=console, refresh_per_second=4) as view:
                while keep_going():
                    time.sleep(0.25)  # the refresh rate of the view, not a wait for a result
                    view.update(live_view(state(phase)))
            return
        last = time.monotonic()
        while keep_going():
            time.sleep(0.25)
            if time.monotonic() - last >= plain_every_s:
                last = time.monotonic()
                console.print(plain_line(state(phase)), highlight=False)
        console.print(plain_line(state(phase)), highlight=False)

    return show


def _print_dead_letters(console: Console, app: Application, settings: DemoSettings) -> None:
    """What `siding dlq list` shows: the same Spark job, on the demo's running session."""
    from siding.dlq.filters import build_filter
    from siding.dlq.list import list_letters
    from siding.dlq.read import open_scope
    from siding.dlq.render import letters_table

    if app.spark is None:
        return
    console.print(f"$ siding dlq list --route {ROUTE} --limit {settings.dead_letters_shown}")
    scope = open_scope(app.config, ROUTE)
    chosen = build_filter(since=None, until=None, reason=None, key=None, now_ms=0)
    rows = list_letters(app.spark, scope, chosen, settings.dead_letters_shown)
    console.print(letters_table(rows, f"{len(rows)} dead letter(s) of route {ROUTE}"))
