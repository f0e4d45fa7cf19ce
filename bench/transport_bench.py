"""Transport micro-benchmark: messages/s and client CPU per message for gRPC unary, gRPC stream
and HTTP webhooks, each against a simulated consumer (zero latency) in its own process on
loopback, so only the client's CPU is counted.

    python -m bench.transport_bench [--count 20000] [--in-flight 256]

Writes bench/results/transport.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings
from siding.model import Delivery
from siding.transport.base import Transport
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport
from siding.transport.http import HttpTransport

RESULTS = Path(__file__).parent / "results" / "transport.json"
SECRET = "whsec_" + "YmVuY2htYXJrLXNpZ25pbmctc2VjcmV0LTEyMzQ1Ng=="
DEADLINE_S = 30.0
WARMUP = 1_000
PAYLOAD = b'{"order": 12345, "amount": "19.99", "currency": "EUR"}'


@dataclass(frozen=True, slots=True)
class Run:
    transport: str
    messages: int
    in_flight: int
    seconds: float
    msgs_per_s: float
    client_cpu_us_per_msg: float
    outcomes: dict[str, int]


def deliveries(count: int, first: int = 0) -> list[Delivery]:
    return [
        Delivery(f"bench/0/{n}", "bench", 0, n, key=f"k{n % 64}".encode(), value=PAYLOAD)
        for n in range(first, first + count)
    ]


async def drive(transport: Transport, batch: list[Delivery], in_flight: int) -> Counter[str]:
    """Send ``batch`` keeping ``in_flight`` deliveries on the wire (a dispatcher's window)."""
    outcomes: Counter[str] = Counter()
    pending = iter(batch)

    async def worker() -> None:
        for delivery in pending:
            outcome = await transport.send(delivery, DEADLINE_S)
            outcomes[outcome.kind.name] += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return outcomes


async def measure(name: str, make: Callable[[], Transport], count: int, in_flight: int) -> Run:
    transport = make()
    try:
        await drive(transport, deliveries(WARMUP, first=10**9), in_flight)
        batch = deliveries(count)
        cpu, wall = time.process_time(), time.perf_counter()
        outcomes = await drive(transport, batch, in_flight)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await transport.close()
    return Run(
        name, count, in_flight, round(wall, 3), round(count / wall), round(cpu / count * 1e6, 1),
        dict(outcomes),
    )  # fmt: skip


def bench(count: int, in_flight: int) -> list[Run]:
    runs: list[Run] = []
    with SimConsumerProcess(SimSettings("grpc")) as sim:
        target = sim.target
        runs.append(
            asyncio.run(measure("grpc-unary", lambda: GrpcUnaryTransport(target), count, in_flight))
        )
        runs.append(
            asyncio.run(
                measure("grpc-stream", lambda: GrpcStreamTransport(target), count, in_flight)
            )
        )
    with SimConsumerProcess(SimSettings("http", webhook_secret=SECRET)) as sim:
        url = sim.url

        def http() -> Transport:
            return HttpTransport(url, secret=SECRET, max_connections=in_flight)

        runs.append(asyncio.run(measure("http (signed)", http, count, in_flight)))
    return runs  # fmt: skip


def environment() -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "grpcio": version("grpcio"),
        "aiohttp": version("aiohttp"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "when_unix_s": round(time.time()),
    }


def table(runs: list[Run]) -> str:
    lines = [
        f"{'transport':<15} {'msgs':>7} {'in flight':>9} {'msgs/s':>8} {'client CPU µs/msg':>18}"
    ]
    for r in runs:
        lines.append(
            f"{r.transport:<15} {r.messages:>7} {r.in_flight:>9} {r.msgs_per_s:>8.0f}"
            f" {r.client_cpu_us_per_msg:>18.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    runs = bench(args.count, args.in_flight)
    report = {
        "benchmark": "transport",
        "environment": environment(),
        "runs": [asdict(r) for r in runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(runs))
    print(f"\nwritten to {args.out}")
    failed = [r.transport for r in runs if set(r.outcomes) != {"ACK"}]
    if failed:
        raise SystemExit(f"not every delivery was acknowledged: {failed}")


if __name__ == "__main__":
    main()
