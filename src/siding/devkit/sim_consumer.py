"""A simulated consumer service for tests, demos and benchmarks (``siding sim consumer``).

Each delivery's fate (ACK, RETRY, DEAD, hang, slow) is drawn from a hash of its id and a seed,
so a retried message meets the same fate (unless redrawn per attempt). It serves the gRPC
contract or HTTP webhooks, and can record one CSV line per delivery received.
"""

from __future__ import annotations

import asyncio
import csv
import enum
import hashlib
import io
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from aiohttp import web

from siding.consumer import (
    BatchEnvelopeError,
    ConsumerServer,
    Reply,
    ack,
    answer_batch,
    batch_answer,
    dead,
    deliveries_from_batch,
    is_batch,
    retry,
)
from siding.devkit.process import stop_process
from siding.errors import SidingError
from siding.model import Delivery
from siding_consumer.envelope import (
    READS_BATCHES,
    RESULT_STREAM_TYPE,
    accepts_result_stream,
    result_line,
)

SEQ_HEADER = "sim-seq"
PRODUCED_AT_HEADER = "sim-produced-at"
# ``lane`` only when the delivery said which lane it came from.
RECORD_FIELDS = (
    "delivery_id",
    "attempt",
    "receive_time_unix_s",
    "produce_ts_unix_s",
    "seq",
    "lane",
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m)?\s*$")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``"200ms"``, ``"1.5s"``, ``"2m"``, ``"250us"``, ``"0"`` (bare numbers are seconds)."""
    match = _DURATION.match(text)
    if match is None:
        raise SidingError(f"not a duration: {text!r} (try 200ms, 1.5s, 2m)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def parse_latency(text: str) -> tuple[float, float]:
    """A latency or a uniform range: ``"200ms"`` -> (0.2, 0.2); ``"0-5ms"`` -> (0, 0.005)."""
    low, sep, high = text.partition("-")
    if not sep:
        value = parse_duration(text)
        return value, value
    unit = _DURATION.match(high)
    # "0-5ms": the unit of the upper bound applies to a bare lower bound too.
    if unit is not None and unit.group(2) and _DURATION.match(low) and low.strip()[-1].isdigit():
        low = low.strip() + unit.group(2)
    bounds = parse_duration(low), parse_duration(high)
    if bounds[0] > bounds[1]:
        raise SidingError(f"latency range {text!r} runs backwards")
    return bounds


CRASH_EXIT_CODE = 70


class Fate(enum.Enum):
    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"
    HANG = "hang"


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How the simulated consumer treats deliveries. Ratios are shares of all deliveries."""

    latency_s: tuple[float, float] = (0.0, 0.0)
    dead_ratio: float = 0.0
    retry_ratio: float = 0.0
    hang_ratio: float = 0.0
    slow_ratio: float = 0.0
    slow_latency_s: float = 2.0
    retry_until_attempt: int | None = None
    redraw_per_attempt: bool = False
    retry_after_s: float | None = None
    seed: int = 0
    # RETRY the first attempt of every n-th message of a key (0: off); keys are the producer's
    # round-robin ``k{seq % keys}``, so a message's place in its key is ``seq // keys``.
    retry_every: int = 0
    keys: int = 1

    def __post_init__(self) -> None:
        ratios = (self.dead_ratio, self.retry_ratio, self.hang_ratio, self.slow_ratio)
        if any(not 0.0 <= r <= 1.0 for r in ratios) or sum(ratios) > 1.0 + 1e-9:
            raise SidingError("sim ratios must each be in [0, 1] and add up to at most 1")


@dataclass(frozen=True, slots=True)
class Plan:
    """What the simulated consumer does with one delivery: wait ``delay_s``, then ``fate``."""

    fate: Fate
    delay_s: float


def draw(seed: int, delivery_id: str, attempt: int | None, salt: str) -> float:
    """A number in [0, 1) fixed by its inputs."""
    text = f"{seed}\x00{salt}\x00{delivery_id}\x00{'' if attempt is None else attempt}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def plan(behaviour: Behaviour, delivery_id: str, attempt: int) -> Plan:
    b = behaviour
    key_attempt = attempt if b.redraw_per_attempt else None
    u = draw(b.seed, delivery_id, key_attempt, "fate")
    low, high = b.latency_s
    delay = low + (high - low) * draw(b.seed, delivery_id, key_attempt, "latency")
    bands = ((Fate.DEAD, b.dead_ratio), (Fate.RETRY, b.retry_ratio), (Fate.HANG, b.hang_ratio))
    for fate, ratio in bands:
        if u < ratio:
            until = b.retry_until_attempt
            enough = fate is Fate.RETRY and until is not None and attempt >= until
            return Plan(Fate.ACK if enough else fate, delay)
        u -= ratio
    if u < b.slow_ratio:
        return Plan(Fate.ACK, b.slow_latency_s)
    return Plan(Fate.ACK, delay)


def fails_first_attempt(behaviour: Behaviour, seq: int | None, attempt: int) -> bool:
    """The ``retry_every`` rule: the first attempt of every n-th message of each key fails."""
    n = behaviour.retry_every
    if n <= 0 or seq is None or attempt != 1:
        return False
    return (seq // max(1, behaviour.keys)) % n == n - 1


def answer(behaviour: Behaviour, delivery_id: str, attempt: int, seq: int | None) -> Plan:
    """What the simulated consumer does with a delivery: its ``plan``, then the
    ``retry_every`` rule on top."""
    step = plan(behaviour, delivery_id, attempt)
    if fails_first_attempt(behaviour, seq, attempt):
        return Plan(Fate.RETRY, step.delay_s)
    return step


def record_line(
    delivery_id: str,
    attempt: int,
    received_s: float,
    headers: Mapping[str, str],
    lane: int | None = None,
) -> str:
    """One CSV line for a delivery received; produce time and seq stay empty without headers."""
    produced = headers.get(PRODUCED_AT_HEADER, "")
    seq = headers.get(SEQ_HEADER, "")
    row: list[object] = [delivery_id, attempt, f"{received_s:.6f}", produced, seq]
    if lane is not None:
        row.append(lane)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(row)
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class Received:
    delivery_id: str
    attempt: int
    received_s: float
    produced_s: float | None
    seq: int | None
    lane: int | None = None


def read_records(path: str | os.PathLike[str]) -> list[Received]:
    """Every complete line of a record file (a line still being written is skipped, and so is
    one cut short when its process was killed in the middle of writing it: see ``Recorder``)."""
    text = Path(path).read_text() if Path(path).exists() else ""
    complete = text[: text.rfind("\n") + 1]
    received = []
    for row in csv.reader(io.StringIO(complete)):
        try:
            received.append(
                Received(row[0], int(row[1]), float(row[2]), float(row[3]) if row[3] else None,
                         int(row[4]) if row[4] else None,
                         int(row[5]) if len(row) > 5 and row[5] else None)
            )  # fmt: skip
        except (IndexError, ValueError):
            continue
    return received


class Recorder:
    """Appends record lines; one ``write`` per line on an O_APPEND file, so lines from threads
    and processes sharing the file never interleave, and readers see each line at once."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        # A process killed in the middle of a write can leave part of a line (seen once in
        # make test, after a SIGKILL): end it, or this process's first line is glued to it.
        if not _ends_a_line(path):
            os.write(self._fd, b"\n")

    def write(self, line: str) -> None:
        with self._lock:
            if self._fd >= 0:
                os.write(self._fd, line.encode())

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _ends_a_line(path: str | os.PathLike[str]) -> bool:
    """Whether the file is empty or its last byte ends a line."""
    with open(path, "rb") as file:
        if file.seek(0, os.SEEK_END) == 0:
            return True
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


@dataclass(frozen=True, slots=True)
class SimSettings:
    transport: Literal["grpc", "http"] = "grpc"
    behaviour: Behaviour = field(default_factory=Behaviour)
    webhook_secret: str | None = None
    record: str | None = None
    # RETRY in HTTP: 500 is a retry-lane move; 503/429 mean "overloaded" (BACKOFF, no attempt
    # spent), so with them --retry-until-attempt would never get past the first attempt.
    http_retry_status: int = 500
    # The process exits at once on a delivery whose value contains one of these (after recording
    # it): a poison pill that kills the consumer. Only for a consumer in its own process.
    crash_on: tuple[str, ...] = ()
    # HTTP: answer as an SDK's webhook server does (docs/batch.md, "The default"): say
    # ``siding-batch: v1`` on every answer, so a route without a ``batch`` key sends batches,
    # and stream a batch's results as each finishes when siding asks for it.
    reads_batches: bool = False


class _Core:
    """Behaviour + recording, shared by the gRPC and HTTP front ends."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.received = 0
        self._recorder = Recorder(settings.record) if settings.record else None

    def receive(
        self,
        delivery_id: str,
        attempt: int,
        headers: Mapping[str, str],
        value: bytes | None,
        lane: int | None = None,
    ) -> Plan:
        self.received += 1
        if self._recorder is not None:
            self._recorder.write(record_line(delivery_id, attempt, time.time(), headers, lane))
        if value is not None and any(pill.encode() in value for pill in self.settings.crash_on):
            os._exit(CRASH_EXIT_CODE)  # no cleanup, no answer: as a segfault or an OOM kill would
        seq = headers.get(SEQ_HEADER, "")
        return answer(
            self.settings.behaviour, delivery_id, attempt, int(seq) if seq.isdigit() else None
        )

    async def answer(self, delivery: Delivery) -> Reply:
        """A delivery that came with its headers (gRPC, or an item of an HTTP batch)."""
        headers = _text_headers(delivery.headers)
        step = self.receive(delivery.id, delivery.attempt, headers, delivery.value, delivery.lane)
        return _reply(self, await self.carry_out(step))

    async def carry_out(self, step: Plan) -> Fate:
        if step.fate is Fate.HANG:
            await asyncio.get_running_loop().create_future()  # cancelled by the server's stop
        if step.delay_s > 0:
            await asyncio.sleep(step.delay_s)
        return step.fate

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.close()


def _text_headers(headers: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    return {k.lower(): v.decode("utf-8", "replace") for k, v in headers}


def _reply(core: _Core, fate: Fate) -> Reply:
    if fate is Fate.DEAD:
        return dead("sim: dead")
    if fate is Fate.RETRY:
        return retry(core.settings.behaviour.retry_after_s, "sim: retry")
    return ack()


class _Running(Protocol):
    core: _Core
    port: int

    async def stop(self, grace_s: float) -> None: ...


class _GrpcSim:
    def __init__(self, core: _Core, listen: str) -> None:
        self.core = core
        self._server = ConsumerServer(core.answer, listen)
        self.port = 0

    async def start(self) -> None:
        await self._server.start()
        self.port = self._server.port

    async def stop(self, grace_s: float) -> None:
        await self._server.stop(grace_s)
        self.core.close()


class _HttpSim:
    def __init__(self, core: _Core, listen: str) -> None:
        self.core = core
        self._listen = listen
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        secret = self.core.settings.webhook_secret
        if secret is not None:
            from siding.consumer.webhook import WebhookVerificationError, verify_webhook

            try:
                verify_webhook(secret, headers, body)
            except WebhookVerificationError as exc:
                return web.Response(status=401, text=str(exc))
        if is_batch(headers.get("content-type")):
            if self.core.settings.reads_batches and accepts_result_stream(headers):
                return await self._stream_batch(request, body)
            return self._said(await self._handle_batch(body))
        return self._said(await self._handle_single(headers, body))

    def _said(self, response: web.Response) -> web.Response:
        if self.core.settings.reads_batches:
            response.headers[READS_BATCHES[0]] = READS_BATCHES[1]
        return response

    async def _handle_single(self, headers: Mapping[str, str], body: bytes) -> web.Response:
        delivery_id = headers.get("webhook-id")
        if not delivery_id:
            return web.Response(status=400, text="no webhook-id header")
        attempt = int(headers.get("siding-attempt", "1") or 1)
        lane = headers.get("siding-lane", "")
        step = self.core.receive(
            delivery_id, attempt, headers, body, int(lane) if lane.isdigit() else None
        )
        fate = await self.core.carry_out(step)
        if fate is Fate.DEAD:
            return web.Response(status=422, text="sim: dead")
        if fate is Fate.RETRY:
            after = self.core.settings.behaviour.retry_after_s
            extra = {"Retry-After": str(math.ceil(after))} if after is not None else {}
            return web.Response(
                status=self.core.settings.http_retry_status, text="sim: retry", headers=extra
            )
        return web.Response(status=200, text="ok")

    async def _handle_batch(self, body: bytes) -> web.Response:
        """A batch (docs/batch.md): every delivery meets its own fate, answered per delivery."""
        try:
            deliveries = deliveries_from_batch(body)
        except BatchEnvelopeError as exc:
            return web.Response(status=400, text=str(exc))

        results = await answer_batch(self.core.answer, deliveries)
        return web.Response(body=batch_answer(results), content_type="application/json")

    async def _stream_batch(self, request: web.Request, body: bytes) -> web.StreamResponse:
        """A batch answered line by line, each delivery's line as soon as it is done."""
        try:
            deliveries = deliveries_from_batch(body)
        except BatchEnvelopeError as exc:
            return web.Response(status=400, text=str(exc))
        response = web.StreamResponse(
            headers={"content-type": RESULT_STREAM_TYPE, READS_BATCHES[0]: READS_BATCHES[1]}
        )
        await response.prepare(request)

        async def one(delivery: Delivery) -> bytes:
            return result_line(delivery.id, await self.core.answer(delivery))

        for line in asyncio.as_completed([one(d) for d in deliveries]):
            await response.write(await line)
        await response.write_eof()
        return response

    async def start(self) -> None:
        host, _, port = self._listen.rpartition(":")
        await self._runner.setup()
        site = web.TCPSite(self._runner, host or "127.0.0.1", int(port))
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise SidingError(f"cannot listen on {self._listen}: {exc}") from exc
        self.port = int(self._runner.addresses[0][1])

    async def stop(self, grace_s: float) -> None:  # noqa: ARG002 (aiohttp's own timeout)
        await self._runner.cleanup()
        self.core.close()


async def start_sim(settings: SimSettings, listen: str) -> _Running:
    """Start a simulated consumer in the running loop; ``stop`` it when done."""
    core = _Core(settings)
    server: _GrpcSim | _HttpSim = (
        _GrpcSim(core, listen) if settings.transport == "grpc" else _HttpSim(core, listen)
    )
    try:
        await server.start()
    except BaseException:
        core.close()
        raise
    return server


class SimConsumer:
    """A simulated consumer on a background thread with its own event loop.

    ``start()`` returns once it listens; ``stop()`` takes it down; ``start()`` again brings it
    back on the same port (tests of an endpoint that goes away and returns).
    """

    def __init__(self, settings: SimSettings | None = None, listen: str = "127.0.0.1:0") -> None:
        self.settings = settings or SimSettings()
        self._listen = listen
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._running: _Running | None = None
        self._error: BaseException | None = None
        self._grace_s = 0.0
        self.port = 0

    @property
    def target(self) -> str:
        """``host:port`` for gRPC clients."""
        return f"{self._listen.rpartition(':')[0]}:{self.port}"

    @property
    def url(self) -> str:
        """``http://host:port/`` for webhook clients."""
        return f"http://{self.target}/"

    @property
    def received(self) -> int:
        """Deliveries received since the last ``start``."""
        return self._running.core.received if self._running is not None else 0

    def start(self, timeout_s: float = 10.0) -> SimConsumer:
        if self._thread is not None:
            raise SidingError("the simulated consumer is already running")
        ready = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise SidingError(f"the simulated consumer did not start within {timeout_s:g}s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def _run(self, ready: threading.Event) -> None:
        async def main() -> None:
            try:
                self._running = await start_sim(self.settings, self._listen)
            except BaseException as exc:
                self._error = exc
                ready.set()
                return
            self.port = self._running.port
            self._listen = f"{self._listen.rpartition(':')[0]}:{self.port}"
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
            ready.set()
            await self._stop_event.wait()
            await self._running.stop(self._grace_s)

        asyncio.run(main())

    def stop(self, grace_s: float = 0.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stop_event is not None:
            self._grace_s = grace_s
            self._loop.call_soon_threadsafe(self._stop_event.set)
        thread.join()
        self._loop = self._stop_event = None

    def __enter__(self) -> SimConsumer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# The subprocess runs the real CLI, exactly as a person would.
_CLI_ENTRY = "from siding.cli.main import main; main()"
WEBHOOK_SECRET_ENV = "SIDING_SIM_WEBHOOK_SECRET"
_READY = re.compile(r"listening on (\S+):(\d+)")


def cli_args(settings: SimSettings, listen: str) -> list[str]:
    """``siding sim consumer`` options for ``settings`` (the webhook secret travels in
    ``SIDING_SIM_WEBHOOK_SECRET``, not on the command line)."""
    b = settings.behaviour
    args = [
        "--listen", listen, "--transport", settings.transport,
        "--latency", f"{b.latency_s[0]!r}s-{b.latency_s[1]!r}s",
        "--dead-ratio", repr(b.dead_ratio), "--retry-ratio", repr(b.retry_ratio),
        "--hang-ratio", repr(b.hang_ratio), "--slow-ratio", repr(b.slow_ratio),
        "--slow-latency", f"{b.slow_latency_s!r}s", "--seed", str(b.seed),
        "--http-retry-status", str(settings.http_retry_status),
    ]  # fmt: skip
    if b.retry_until_attempt is not None:
        args += ["--retry-until-attempt", str(b.retry_until_attempt)]
    if b.redraw_per_attempt:
        args.append("--redraw-per-attempt")
    if b.retry_after_s is not None:
        args += ["--retry-after", f"{b.retry_after_s!r}s"]
    if b.retry_every:
        args += ["--retry-every", str(b.retry_every), "--keys", str(b.keys)]
    if settings.record is not None:
        args += ["--record", settings.record]
    for pill in settings.crash_on:
        args += ["--crash-on", pill]
    if settings.reads_batches:
        args.append("--reads-batches")
    return args


def run(settings: SimSettings, listen: str, grace_s: float = 1.0) -> None:
    """Serve until SIGTERM or Ctrl-C (the CLI). Prints one ``listening on host:port`` line."""
    from siding.consumer.server import until_signalled

    async def main() -> None:
        running = await start_sim(settings, listen)
        host = listen.rpartition(":")[0]
        print(f"siding sim consumer ({settings.transport}) listening on {host}:{running.port}",
              flush=True)  # fmt: skip
        try:
            await until_signalled()
        finally:
            await running.stop(grace_s)

    asyncio.run(main())


class SimConsumerProcess:
    """A simulated consumer in a child process (its CPU is not the caller's); ``stop`` sends
    SIGTERM, ``start`` again comes back on the same port."""

    def __init__(self, settings: SimSettings | None = None, listen: str = "127.0.0.1:0") -> None:
        self.settings = settings or SimSettings()
        self._listen = listen
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def target(self) -> str:
        return f"{self._listen.rpartition(':')[0]}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}/"

    def start(self, timeout_s: float = 30.0) -> SimConsumerProcess:
        if self._proc is not None:
            raise SidingError("the simulated consumer process is already running")
        env = dict(os.environ)
        if self.settings.webhook_secret is not None:
            env[WEBHOOK_SECRET_ENV] = self.settings.webhook_secret
        command = [sys.executable, "-c", _CLI_ENTRY, "sim", "consumer"]
        proc = subprocess.Popen(
            [*command, *cli_args(self.settings, self._listen)], stdout=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        self._proc = proc
        try:
            self.port = self._await_ready(proc, timeout_s)
        except BaseException:
            self.stop()
            raise
        self._listen = f"{self._listen.rpartition(':')[0]}:{self.port}"
        return self

    @staticmethod
    def _await_ready(proc: subprocess.Popen[str], timeout_s: float) -> int:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([proc.stdout], [], [], remaining)
            line = proc.stdout.readline() if readable else ""
            if match := _READY.search(line):
                return int(match.group(2))
            if readable and not line:
                raise SidingError(f"the simulated consumer exited with code {proc.wait()}")
        raise SidingError(f"the simulated consumer did not start within {timeout_s:g}s")

    def exit_code(self) -> int | None:
        """The exit code once the process has ended on its own; ``None`` while it runs."""
        return None if self._proc is None else self._proc.poll()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process (SIGSTOP: it stops reading, as a hung consumer would)."""
        if self._proc is not None:
            self._proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: the process dies with whatever it holds."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_process(proc, timeout_s)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> SimConsumerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
