"""A TCP relay that counts the bytes it carries each way: put between siding and a consumer, it
measures what went on the wire (compression, framing) without touching either side.

    python -m siding.devkit.wire_relay --upstream 127.0.0.1:50051

prints ``port=N`` once it listens and, at SIGTERM or SIGINT, ``{"up": N, "down": M}`` (bytes
towards the upstream and back).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass

_CHUNK = 64 * 1024


@dataclass
class WireCount:
    """Bytes carried towards the upstream (``up``) and back (``down``), every connection."""

    up: int = 0
    down: int = 0


class WireRelay:
    """Listens on ``listen`` (port 0: any free port) and relays each connection to ``upstream``."""

    def __init__(self, upstream: str, listen: str = "127.0.0.1:0") -> None:
        self.upstream = upstream
        self.listen = listen
        self.count = WireCount()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def target(self) -> str:
        return f"{self.listen.rpartition(':')[0]}:{self.port}"

    async def start(self) -> WireRelay:
        host, _, port = self.listen.rpartition(":")
        self._server = await asyncio.start_server(self._relay, host, int(port))
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = self.upstream.rpartition(":")
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, up=True)),
            asyncio.create_task(self._pump(up_reader, writer, up=False)),
        ]
        self._pumps.update(pumps)
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._pumps.difference_update(pumps)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool
    ) -> None:
        try:
            while chunk := await reader.read(_CHUNK):
                if up:
                    self.count.up += len(chunk)
                else:
                    self.count.down += len(chunk)
                writer.write(chunk)
                await writer.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()


async def _serve(upstream: str, listen: str) -> None:
    relay = await WireRelay(upstream, listen).start()
    print(f"port={relay.port}", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    await stopped.wait()
    await relay.stop()
    print(json.dumps({"up": relay.count.up, "down": relay.count.down}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="host:port to relay to")
    parser.add_argument("--listen", default="127.0.0.1:0")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.upstream, args.listen))


if __name__ == "__main__":
    main()
