"""CPU of siding's dispatch window per send, in one process, with no consumer at all: each call
"answers" ACK after 10 ms on the event loop, so what is measured is the window's own work (and
asyncio's) around a send: without a budget (the baseline), with the in-process budget and with
the budget file every Python worker of a machine shares (docs/dispatch.md, "One budget per route
and endpoint").

    .venv/bin/python -m bench.window_bench [--sends N] [--rounds R] [--out FILE]

Each kind runs ``rounds`` dispatches of ``sends`` records at max_in_flight 200, the kinds
interleaved round by round; the figure is the lowest CPU per send of its rounds (the least
disturbed by other work on the machine), with the median beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from siding.dispatch import DispatchSettings, Work, dispatch
from siding.dispatch.budget import Budget, LocalBudget
from siding.model import ACK, Delivery, Lane, Outcome, delivery_id
from siding.pipeline.executor.budget import SharedBudget

RESULTS = Path(__file__).parent / "results" / "window.json"
LIMIT = 200
KINDS = ("no budget", "in-process budget", "shared budget file")


class _Answers:
    """A transport that answers ACK after ``latency_s`` on the loop, and nothing else."""

    def __init__(self, latency_s: float) -> None:
        self._latency_s = latency_s

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:  # noqa: ARG002
        await asyncio.sleep(self._latency_s)
        return ACK

    async def probe(self) -> bool:
        return True

    async def close(self) -> None:
        return None


def _budget(kind: str, folder: Path) -> Budget | None:
    if kind == "in-process budget":
        return LocalBudget(LIMIT)
    if kind == "shared budget file":
        return SharedBudget(folder / "window-bench.budget", LIMIT)
    return None


async def _measure(sends: int, rounds: int) -> dict[str, list[float]]:
    settings = DispatchSettings(
        max_in_flight=LIMIT, deadline_s=5.0, lanes=(Lane(delay_s=1.0, deadline_s=5.0),)
    )
    transport = _Answers(0.01)
    us_per_send: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        budgets = {kind: _budget(kind, Path(tmp)) for kind in KINDS}
        offset = 0
        for _ in range(rounds):
            for kind in KINDS:
                work = [
                    Work(Delivery(delivery_id("t", 0, o), "t", 0, o, None, b"v"))
                    for o in range(offset, offset + sends)
                ]
                offset += sends
                cpu = time.process_time()
                await dispatch(transport, work, settings, budget=budgets[kind])
                us_per_send[kind].append((time.process_time() - cpu) * 1e6 / sends)
    return us_per_send


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    measured = asyncio.run(_measure(args.sends, args.rounds))
    baseline = min(measured["no budget"])
    rows = [
        {
            "kind": kind,
            "cpu_us_per_send_min": round(min(values), 1),
            "cpu_us_per_send_median": round(statistics.median(values), 1),
            "vs_no_budget": round(min(values) / baseline, 2),
        }
        for kind, values in measured.items()
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "sends": args.sends,
                "rounds": args.rounds,
                "max_in_flight": LIMIT,
                "runs": rows,
            },
            indent=2,
        )
        + "\n"
    )
    for row in rows:
        print(
            f"{row['kind']:>20}: {row['cpu_us_per_send_min']:6.1f} us/send (min),"
            f" {row['cpu_us_per_send_median']:6.1f} (median), x{row['vs_no_budget']}"
        )


if __name__ == "__main__":
    main()
