"""What ``siding demo`` shows: the live view, the plain progress line, the summary (all pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from siding import naming
from siding.pipeline.driver.metrics import LaneMetrics, Snapshot

INTRO = """\
siding demo. A Kafka topic of billing events ({rate:g} msg/s, one partition) is pushed to a
consumer service: most calls go to a fast provider (~10 ms), {slow:.0%} to a slow one (~2 s),
and {dead:.0%} are poison pills it rejects. siding keeps up to {window} calls in flight, moves a
call slower than {deadline:g} s to a retry lane so nothing waits behind it, and dead-letters
the poison pills. Watch delivered/s keep pace with the producer for {duration:g} s."""


@dataclass(frozen=True, slots=True)
class ViewState:
    snapshot: Snapshot
    route: str
    lanes: int
    elapsed_s: float
    duration_s: float
    produced: int
    phase: str = "running"


def _lane(state: ViewState, lane: int) -> LaneMetrics:
    return state.snapshot.lanes.get((state.route, lane), LaneMetrics())


def _all(state: ViewState) -> list[LaneMetrics]:
    return [_lane(state, k) for k in range(state.lanes)]


def delivered(state: ViewState) -> int:
    return sum(m.counts.acked for m in _all(state))


def dead_lettered(state: ViewState) -> int:
    return sum(m.counts.to_dlq for m in _all(state))


def backlog(state: ViewState) -> int:
    """Produced but not yet settled by the main lane (Kafka lag, as the driver sees it)."""
    return max(0, state.produced - _lane(state, 0).counts.records)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def live_view(state: ViewState) -> RenderableType:
    """The table refreshed by ``rich.live.Live``."""
    rate = state.snapshot.rate((state.route, 0))
    head = Text.assemble(
        (f"{state.phase}  ", "bold"),
        f"{state.elapsed_s:5.1f} s / {state.duration_s:g} s   ",
        ("produced ", "dim"),
        f"{state.produced:,}   ",
        ("delivered/s ", "dim"),
        (f"{rate:,.0f}", "bold green"),
        "   ",
        ("in flight ", "dim"),
        f"{sum(m.last_in_flight for m in _all(state)):,}   ",
        ("backlog ", "dim"),
        f"{backlog(state):,}",
    )
    table = Table(expand=False, header_style="bold")
    for column in ("lane", "settled", "acked", "→ next lane", "→ DLQ", "p50", "p99", "max"):
        table.add_column(column, justify="left" if column == "lane" else "right")
    table.add_column("peak in flight", justify="right")
    table.add_column("breaker")
    for k, m in enumerate(_all(state)):
        h = m.latency
        table.add_row(
            naming.lane_label(k),
            f"{m.counts.records:,}",
            f"{m.counts.acked:,}",
            f"{m.counts.to_lane:,}",
            f"{m.counts.to_dlq:,}",
            _ms(h.quantile(0.5)),
            _ms(h.quantile(0.99)),
            _ms(h.max_s),
            f"{m.max_in_flight:,}",
            m.breaker.value,
        )
    foot = Text.assemble(
        ("delivered ", "dim"),
        (f"{delivered(state):,}", "green"),
        ("   dead-lettered ", "dim"),
        (f"{dead_lettered(state):,}", "red"),
        ("   (latency: send → answer; a call cut at the deadline counts its deadline)", "dim"),
    )
    return Group(head, table, foot)


def plain_line(state: ViewState) -> str:
    """One line of progress for logs without a terminal."""
    lanes = " ".join(
        f"{naming.lane_label(k)}={m.counts.records}/{m.counts.to_lane}/{m.counts.to_dlq}"
        for k, m in enumerate(_all(state))
    )
    main = _lane(state, 0).latency
    return (
        f"[{state.elapsed_s:5.1f}s] {state.phase} produced={state.produced}"
        f" delivered={delivered(state)} dlq={dead_lettered(state)}"
        f" rate={state.snapshot.rate((state.route, 0)):.0f}/s backlog={backlog(state)}"
        f" p50={_ms(main.quantile(0.5))} p99={_ms(main.quantile(0.99))}"
        f" breaker={_lane(state, 0).breaker.value} lanes(settled/next/dlq): {lanes}"
    )


@dataclass(frozen=True, slots=True)
class SerialEstimate:
    """A plain consumer on the same traffic: one message at a time, committing after each."""

    busy_s: float  # the sum of every message's consumer latency
    msgs_per_s: float
    done_in_run: int  # finished within the run's wall time
    behind: int  # produced but not finished when the run ended
    catch_up_s: float  # consumer time still needed for those


def serial_estimate(
    delays_s: Sequence[float], produced_at_s: Sequence[float], horizon_s: float
) -> SerialEstimate:
    """Replay the traffic through one serial consumer: message ``i`` starts when it has been
    produced and the previous one is done, and takes ``delays_s[i]`` (no network cost at all,
    so this flatters the serial consumer)."""
    clock, done = 0.0, 0
    for delay, produced in zip(delays_s, produced_at_s, strict=True):
        start = max(clock, produced)
        if start + delay > horizon_s:
            break
        clock, done = start + delay, done + 1
    busy = sum(delays_s)
    return SerialEstimate(
        busy_s=busy,
        msgs_per_s=len(delays_s) / busy if busy > 0 else 0.0,
        done_in_run=done,
        behind=len(delays_s) - done,
        catch_up_s=sum(delays_s[done:]),
    )


def summary_lines(
    state: ViewState, serial: SerialEstimate, run_s: float, main_s: float, drained: bool
) -> list[str]:
    """``run_s``: seconds of traffic; ``main_s``: when the main lane had settled all of it."""
    main = _lane(state, 0)
    h = main.latency
    siding_rate = main.counts.records / main_s if main_s > 0 else 0.0
    return [
        "",
        "summary",
        f"  produced          {state.produced:,} messages (the first few warmed Spark up),"
        f" then {run_s:.1f} s of steady traffic",
        f"  delivered (ACK)   {delivered(state):,}   dead-lettered {dead_lettered(state):,}"
        f"   moved to a retry lane {main.counts.to_lane:,}",
        f"  siding            the main lane settled {main.counts.records:,} in {main_s:.1f} s"
        f" ({siding_rate:,.0f} msg/s); p50 {_ms(h.quantile(0.5))}, p99 {_ms(h.quantile(0.99))}"
        " per call; the slow calls finished in retry-1"
        + ("" if drained else "  (stopped before every lane caught up)"),
        f"  plain consumer    {serial.msgs_per_s:,.1f} msg/s: it would have finished"
        f" {serial.done_in_run:,} of {state.produced:,} in the same {run_s:.0f} s and be"
        f" {serial.behind:,} behind, needing {serial.catch_up_s / 60:,.1f} more minutes",
        "                    (one message at a time in offset order, each taking the latency"
        " the consumer service",
        "                    drew for it, slow calls waited out in full; no network cost)",
    ]
