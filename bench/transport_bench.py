"""Transport micro-benchmark: messages/s and client CPU per message for gRPC unary, gRPC stream
and HTTP webhooks, batched delivery (docs/batch.md) over gRPC and HTTP at several batch sizes,
and the transport a route with the defaults gets for each scheme (``grpc (defaults)``, ``http
(defaults)``: built by siding.transport.factory from a route naming only its endpoint), each
against a simulated consumer (zero latency) in its own process on loopback, so only the
client's CPU is counted.

    python -m bench.transport_bench [--count 20000] [--in-flight 256] [--batches 1,16,64,256]

A batched run keeps at least two full batches in flight (``max(in_flight, 2 * batch)``), as a
dispatcher with ``max_in_flight`` of that size would. Writes bench/results/transport.json and
prints a table, with each batched run's CPU per message as a share of its transport unbatched.
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

from siding.config import parse_route
from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings
from siding.model import Delivery
from siding.transport.base import Transport
from siding.transport.batching import BatchLimits
from siding.transport.factory import make_transport
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.http_batch import HttpBatchTransport

RESULTS = Path(__file__).parent / "results" / "transport.json"
SECRET = "whsec_" + "YmVuY2htYXJrLXNpZ25pbmctc2VjcmV0LTEyMzQ1Ng=="
DEADLINE_S = 30.0
WARMUP = 1_000
PAYLOAD = b'{"order": 12345, "amount": "19.99", "currency": "EUR"}'
BATCHES = (1, 16, 64, 256)
LINGER_S = 0.005
MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Run:
    transport: str
    messages: int
    in_flight: int
    seconds: float
    msgs_per_s: float
    client_cpu_us_per_msg: float
    outcomes: dict[str, int]
    batch: int = 0  # 0: one delivery per message (no batching)


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


async def measure(
    name: str, make: Callable[[], Transport], count: int, in_flight: int, batch: int = 0
) -> Run:
    transport = make()
    try:
        await drive(transport, deliveries(WARMUP, first=10**9), in_flight)
        messages = deliveries(count)
        cpu, wall = time.process_time(), time.perf_counter()
        outcomes = await drive(transport, messages, in_flight)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await transport.close()
    return Run(
        name, count, in_flight, round(wall, 3), round(count / wall), round(cpu / count * 1e6, 1),
        dict(outcomes), batch,
    )  # fmt: skip


def with_defaults(url: str, in_flight: int, secret: str | None = None) -> Callable[[], Transport]:
    """The transport a route with the defaults gets for ``url`` (and a webhook ``secret``)."""
    table: dict[str, object] = {"name": "bench", "topic": "bench", "group": "b", "endpoint": url}
    if secret is not None:
        table["auth"] = {"webhook_secret": secret}
    route = parse_route(table)
    return lambda: make_transport(route, route.endpoint[0], in_flight)


def bench(count: int, in_flight: int, batches: tuple[int, ...] = BATCHES) -> list[Run]:
    runs: list[Run] = []
    with SimConsumerProcess(SimSettings("grpc")) as sim:
        spec = ChannelSpec(sim.target)
        runs.append(
            asyncio.run(measure("grpc-unary", lambda: GrpcUnaryTransport(spec), count, in_flight))
        )
        runs.append(
            asyncio.run(measure("grpc-stream", lambda: GrpcStreamTransport(spec), count, in_flight))
        )
        defaults = with_defaults(f"grpc://{sim.target}", in_flight)
        runs.append(asyncio.run(measure("grpc (defaults)", defaults, count, in_flight)))
        for size in batches:
            limits = BatchLimits(size, LINGER_S, MAX_BYTES)

            def grpc_batch(limits: BatchLimits = limits) -> Transport:
                return GrpcBatchTransport(spec, limits=limits)

            window = max(in_flight, 2 * size)
            name = f"grpc-batch/{size}"
            runs.append(asyncio.run(measure(name, grpc_batch, count, window, size)))
    with SimConsumerProcess(SimSettings("http", webhook_secret=SECRET)) as sim:
        webhook = WebhookSpec(sim.url, secret=SECRET, max_connections=in_flight)

        def http() -> Transport:
            return HttpTransport(webhook)

        runs.append(asyncio.run(measure("http (signed)", http, count, in_flight)))
        defaults = with_defaults(sim.url, in_flight, SECRET)
        runs.append(asyncio.run(measure("http (defaults, signed)", defaults, count, in_flight)))
        for size in batches:
            limits = BatchLimits(size, LINGER_S, MAX_BYTES)

            def http_batch(limits: BatchLimits = limits) -> Transport:
                return HttpBatchTransport(webhook, limits=limits)

            window = max(in_flight, 2 * size)
            name = f"http-batch/{size} (signed)"
            runs.append(asyncio.run(measure(name, http_batch, count, window, size)))
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


def unbatched(runs: list[Run], run: Run) -> Run | None:
    """The one-message-per-delivery run of the same transport as the batched ``run``."""
    family = "grpc-stream" if run.transport.startswith("grpc") else "http (signed)"
    return next((r for r in runs if r.transport == family), None)


def table(runs: list[Run]) -> str:
    lines = [
        f"{'transport':<24} {'msgs':>7} {'in flight':>9} {'msgs/s':>8} {'client CPU µs/msg':>18}"
        f" {'vs unbatched':>12}"
    ]
    for r in runs:
        base = unbatched(runs, r) if r.batch else None
        share = f"{r.client_cpu_us_per_msg / base.client_cpu_us_per_msg:.2f}" if base else ""
        lines.append(
            f"{r.transport:<24} {r.messages:>7} {r.in_flight:>9} {r.msgs_per_s:>8.0f}"
            f" {r.client_cpu_us_per_msg:>18.1f} {share:>12}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--batches", default=",".join(map(str, BATCHES)), help="batch sizes, comma-separated"
    )
    args = parser.parse_args(argv)
    batches = tuple(int(b) for b in args.batches.split(",") if b.strip())
    runs = bench(args.count, args.in_flight, batches)
    report = {
        "benchmark": "transport",
        "environment": environment(),
        "batch_linger_s": LINGER_S,
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
