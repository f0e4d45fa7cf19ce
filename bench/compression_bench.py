"""Compression on the wire (route.compression): the client's CPU per message and the bytes that
cross the wire per message, gzip on and off, on a 4 KiB JSON value, for the gRPC stream, the
gRPC batch (64), HTTP (signed) and HTTP batch (64, signed) transports. Each runs against a
simulated consumer (zero latency) in its own process, through a byte-counting relay
(``siding.devkit.wire_relay``) in a third, so neither's CPU is the client's.

    python -m bench.compression_bench [--count 5000] [--in-flight 256]

Adds its rows under ``compression`` in bench/results/transport.json (the other rows stay) and
prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.transport_bench import DEADLINE_S, LINGER_S, MAX_BYTES, RESULTS, SECRET, drive
from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings
from siding.devkit.wire_relay import WireCount
from siding.model import Delivery
from siding.transport.base import Transport
from siding.transport.batching import BatchLimits
from siding.transport.compression import OFF, Compression
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.http_batch import HttpBatchTransport

VALUE_BYTES = 4096
WARMUP = 500
BATCH = 64
GZIP = Compression("gzip", 1024)


@dataclass(frozen=True, slots=True)
class WireRun:
    transport: str
    compression: str
    value_bytes: int
    messages: int
    in_flight: int
    seconds: float
    msgs_per_s: float
    client_cpu_us_per_msg: float
    wire_bytes_per_msg: float  # towards the consumer, every frame and header included
    outcomes: dict[str, int]


@functools.cache
def order_json(n: int, size: int = VALUE_BYTES) -> bytes:
    """An order record of ``size`` bytes of JSON: keys repeat, numbers and ids vary (as real
    records do; a value of one repeated byte would flatter gzip)."""
    rng = random.Random(n)
    items: list[dict[str, object]] = []
    text = b""
    while True:
        items.append(
            {
                "sku": f"SKU-{rng.randrange(10**6):06d}",
                "name": rng.choice(["mug", "lamp", "chair", "desk", "pen", "book", "plant"]),
                "qty": rng.randrange(1, 9),
                "price": f"{rng.randrange(100, 100_000) / 100:.2f}",
                "warehouse": rng.choice(["AMS-1", "FRA-2", "DUB-1"]),
            }
        )
        candidate = json.dumps({"order": n, "currency": "EUR", "items": items}).encode()
        if len(candidate) > size:
            return text.ljust(size, b" ")
        text = candidate


def deliveries(count: int, first: int = 0) -> list[Delivery]:
    return [
        Delivery(f"bench/0/{n}", "bench", 0, n, key=None, value=order_json(n % 512))
        for n in range(first, first + count)
    ]


@contextmanager
def relay(upstream: str) -> Iterator[tuple[str, WireCount]]:
    """A wire relay in its own process; its count is filled in when the block ends."""
    command = [sys.executable, "-m", "siding.devkit.wire_relay", "--upstream", upstream]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("port="):
        proc.kill()
        raise RuntimeError(f"the wire relay did not start: {line!r}")
    count = WireCount()
    try:
        yield f"127.0.0.1:{line.removeprefix('port=')}", count
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        totals = json.loads(out.strip().splitlines()[-1])
        count.up, count.down = totals["up"], totals["down"]


async def measure(
    make: Callable[[], Transport], count: int, in_flight: int
) -> tuple[float, float, dict[str, int]]:
    transport = make()
    try:
        await drive(transport, deliveries(WARMUP, first=10**9), in_flight)
        messages = deliveries(count)
        cpu, wall = time.process_time(), time.perf_counter()
        outcomes = await drive(transport, messages, in_flight)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await transport.close()
    return wall, cpu, dict(outcomes)


def run_one(
    name: str,
    choice: Compression,
    upstream: str,
    make: Callable[[str], Transport],
    *,
    count: int,
    in_flight: int,
) -> WireRun:  # fmt: skip
    with relay(upstream) as (target, wire):
        wall, cpu, outcomes = asyncio.run(measure(lambda: make(target), count, in_flight))
    total = count + WARMUP
    return WireRun(
        name, choice.codec, VALUE_BYTES, count, in_flight, round(wall, 3), round(count / wall),
        round(cpu / count * 1e6, 1), round(wire.up / total), outcomes,
    )  # fmt: skip


def bench(count: int, in_flight: int) -> list[WireRun]:
    runs: list[WireRun] = []
    limits = BatchLimits(BATCH, LINGER_S, MAX_BYTES)
    window = max(in_flight, 2 * BATCH)
    with SimConsumerProcess(SimSettings("grpc")) as sim:
        for choice in (OFF, GZIP):

            def stream(target: str, choice: Compression = choice) -> Transport:
                return GrpcStreamTransport(ChannelSpec(target, compression=choice))

            def batch(target: str, choice: Compression = choice) -> Transport:
                return GrpcBatchTransport(ChannelSpec(target, compression=choice), limits=limits)

            name = f"grpc-batch/{BATCH}"
            runs.append(
                run_one("grpc-stream", choice, sim.target, stream, count=count, in_flight=in_flight)
            )
            runs.append(run_one(name, choice, sim.target, batch, count=count, in_flight=window))
    with SimConsumerProcess(SimSettings("http", webhook_secret=SECRET)) as sim:
        for choice in (OFF, GZIP):

            def spec(target: str, choice: Compression = choice) -> WebhookSpec:
                url = f"http://{target}/"
                return WebhookSpec(
                    url, secret=SECRET, max_connections=in_flight, compression=choice
                )

            def http(target: str) -> Transport:
                return HttpTransport(spec(target))

            def http_batch(target: str) -> Transport:
                return HttpBatchTransport(spec(target), limits=limits)

            name = f"http-batch/{BATCH} (signed)"
            runs.append(
                run_one("http (signed)", choice, sim.target, http, count=count, in_flight=in_flight)
            )
            runs.append(
                run_one(name, choice, sim.target, http_batch, count=count, in_flight=window)
            )
    return runs


def table(runs: list[WireRun]) -> str:
    lines = [
        f"{'transport':<24} {'gzip':>5} {'msgs':>6} {'msgs/s':>7} {'client CPU µs/msg':>18}"
        f" {'wire B/msg':>10} {'vs off':>7}"
    ]
    for r in runs:
        off = next(o for o in runs if o.transport == r.transport and o.compression == "none")
        share = f"{r.wire_bytes_per_msg / off.wire_bytes_per_msg:.2f}" if r is not off else ""
        lines.append(
            f"{r.transport:<24} {r.compression:>5} {r.messages:>6} {r.msgs_per_s:>7.0f}"
            f" {r.client_cpu_us_per_msg:>18.1f} {r.wire_bytes_per_msg:>10.0f} {share:>7}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=5_000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    runs = bench(args.count, args.in_flight)
    report = json.loads(args.out.read_text()) if args.out.exists() else {"benchmark": "transport"}
    report["compression"] = {
        "deadline_s": DEADLINE_S,
        "value": f"{VALUE_BYTES} bytes of JSON (bench.compression_bench.order_json)",
        "compress_above": GZIP.above,
        "when_unix_s": round(time.time()),
        "runs": [asdict(r) for r in runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(runs))
    print(f"\nwritten to {args.out} (compression)")
    failed = [r.transport for r in runs if r.outcomes.get("ACK") != r.messages]
    if failed:
        raise SystemExit(f"not every delivery was acknowledged: {failed}")


if __name__ == "__main__":
    main()
