"""The simulated consumer: deterministic fates, the record file, both front ends, restarts."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path
from typing import Literal

import pytest

from siding.cli.sim import consumer as consumer_command
from siding.cli.sim import settings_from_options
from siding.devkit.sim_consumer import (
    SEQ_HEADER,
    Behaviour,
    Fate,
    Plan,
    Recorder,
    SimConsumer,
    SimConsumerProcess,
    SimSettings,
    cli_args,
    fails_first_attempt,
    parse_duration,
    parse_latency,
    plan,
    read_records,
    record_line,
)
from siding.devkit.wait import wait_until
from siding.errors import SidingError
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport.base import Transport
from siding.transport.batching import BatchLimits
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.grpc_common import ChannelSpec
from siding.transport.grpc_stream import GrpcStreamTransport
from siding.transport.grpc_unary import GrpcUnaryTransport
from siding.transport.http import HttpTransport, WebhookSpec
from siding.transport.http_batch import HttpBatchTransport

SECRET = "whsec_" + "c2lkaW5nLXNpbXVsYXRlZC1jb25zdW1lcg=="
IDS = [f"orders/{n % 4}/{n}" for n in range(4000)]
MIXED = Behaviour(dead_ratio=0.1, retry_ratio=0.2, hang_ratio=0.05, slow_ratio=0.05, seed=7)

# --- pure parts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("200ms", 0.2), ("1.5s", 1.5), ("2m", 120.0), ("250us", 0.00025), ("3", 3.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "bounds"),
    [("200ms", (0.2, 0.2)), ("0-5ms", (0.0, 0.005)), ("1ms-1s", (0.001, 1.0)), ("0", (0, 0))],
)
def test_parse_latency(text: str, bounds: tuple[float, float]) -> None:
    assert parse_latency(text) == pytest.approx(bounds)


@pytest.mark.parametrize("text", ["fast", "5h", "-1s", "5ms-1ms"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(SidingError):
        parse_latency(text)


def test_fates_are_fixed_by_id_and_seed() -> None:
    first = [plan(MIXED, i, 1) for i in IDS]
    assert first == [plan(MIXED, i, 1) for i in IDS]
    # ...the same on a later attempt (a retried message meets the same fate)...
    assert first == [plan(MIXED, i, 3) for i in IDS]
    # ...but another seed draws differently.
    reseeded = Behaviour(dead_ratio=0.1, retry_ratio=0.2, hang_ratio=0.05, slow_ratio=0.05, seed=8)
    assert first != [plan(reseeded, i, 1) for i in IDS]


def test_fate_shares_follow_the_ratios() -> None:
    plans = [plan(MIXED, i, 1) for i in IDS]
    shares = Counter(p.fate for p in plans)
    slow = sum(1 for p in plans if p.fate is Fate.ACK and p.delay_s == MIXED.slow_latency_s)
    for fate, ratio in ((Fate.DEAD, 0.1), (Fate.RETRY, 0.2), (Fate.HANG, 0.05)):
        assert shares[fate] / len(IDS) == pytest.approx(ratio, abs=0.02)
    assert slow / len(IDS) == pytest.approx(0.05, abs=0.02)


def test_retry_until_attempt_turns_retries_into_acks() -> None:
    behaviour = Behaviour(retry_ratio=1.0, retry_until_attempt=3)
    assert [plan(behaviour, "t/0/1", a).fate for a in (1, 2, 3, 4)] == [
        Fate.RETRY,
        Fate.RETRY,
        Fate.ACK,
        Fate.ACK,
    ]


def test_redraw_per_attempt_gives_new_fates() -> None:
    behaviour = Behaviour(dead_ratio=0.5, redraw_per_attempt=True)
    changed = sum(plan(behaviour, i, 1).fate != plan(behaviour, i, 2).fate for i in IDS[:200])
    assert 50 < changed < 150


def test_latency_is_drawn_from_the_range() -> None:
    behaviour = Behaviour(latency_s=(0.01, 0.02))
    delays = [plan(behaviour, i, 1).delay_s for i in IDS[:500]]
    assert min(delays) >= 0.01
    assert max(delays) <= 0.02
    assert len(set(delays)) > 100


def test_ratios_over_one_are_refused() -> None:
    with pytest.raises(SidingError, match="add up"):
        Behaviour(dead_ratio=0.6, retry_ratio=0.6)


def test_record_line() -> None:
    headers = {"sim-produced-at": "1700000000.250000", "sim-seq": "41"}
    assert record_line("t/0/41", 2, 1700000001.5, headers) == (
        "t/0/41,2,1700000001.500000,1700000000.250000,41\n"
    )
    assert record_line("a,b", 1, 2.0, {}) == '"a,b",1,2.000000,,\n'


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "record.csv"
    recorders = [Recorder(path) for _ in range(2)]  # two "processes" appending to one file

    def write(worker: int) -> None:
        for n in range(500):
            recorders[worker % 2].write(record_line(f"t/{worker}/{n}", 1, 1.0, {}))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for recorder in recorders:
        recorder.close()
    rows = read_records(path)
    assert len(rows) == 4000
    assert len({r.delivery_id for r in rows}) == 4000


@pytest.mark.parametrize(
    ("seq", "attempt", "fails"),
    [
        (9 * 30 + 4, 1, True),  # key k4's tenth message, first attempt
        (9 * 30 + 4, 2, False),  # ...answered ACK when it comes again
        (8 * 30 + 4, 1, False),  # key k4's ninth message
        (19 * 30, 1, True),  # key k0's twentieth
        (None, 1, False),  # no sequence number: the rule cannot apply
    ],
)
def test_every_tenth_message_of_a_key_fails_its_first_attempt(
    seq: int | None, attempt: int, fails: bool
) -> None:
    assert fails_first_attempt(Behaviour(retry_every=10, keys=30), seq, attempt) is fails
    assert not fails_first_attempt(Behaviour(), seq, attempt)


def test_settings_survive_the_command_line() -> None:
    settings = SimSettings(
        transport="http",
        behaviour=Behaviour((0.001, 0.005), 0.1, 0.2, 0.05, 0.01, 1.5, 3, True, 2.0, 42, 10, 30),
        record="/tmp/r.csv",
        http_retry_status=503,
        crash_on=('"seq": 7}', '"seq": 9}'),
        reads_batches=True,
    )
    context = consumer_command.make_context("consumer", cli_args(settings, "127.0.0.1:9"))
    options = dict(context.params)
    assert options.pop("listen") == "127.0.0.1:9"
    assert settings_from_options(**options) == settings


# --- over the wire ----------------------------------------------------------------------------


def delivery(n: int, attempt: int = 1, seq: bool = True) -> Delivery:
    headers = (("sim-seq", str(n).encode()), ("sim-produced-at", b"1700000000.5"))
    return Delivery(
        f"orders/0/{n}", "orders", 0, n, None, b"{}", headers if seq else (), attempt=attempt
    )


EXPECTED = {Fate.ACK: OutcomeKind.ACK, Fate.DEAD: OutcomeKind.DEAD, Fate.RETRY: OutcomeKind.RETRY}


async def _send_all(
    client: Transport,
    deliveries: list[Delivery],
    deadline_s: float = 2.0,
) -> list[Outcome]:
    try:
        return await asyncio.gather(*(client.send(d, deadline_s) for d in deliveries))
    finally:
        await client.close()


def _client(transport: str, sim: SimConsumer) -> Transport:
    limits = BatchLimits(max_items=16, linger_s=0.005, max_bytes=1 << 20)
    if transport == "grpc":
        return GrpcStreamTransport(ChannelSpec(sim.target))
    if transport == "grpc-batch":
        return GrpcBatchTransport(ChannelSpec(sim.target), limits=limits)
    if transport == "http-batch":
        return HttpBatchTransport(WebhookSpec(sim.url, secret=SECRET), limits=limits)
    if transport == "http-offered":
        spec = WebhookSpec(sim.url, secret=SECRET)
        return HttpBatchTransport(spec, limits=limits, offered=True)
    return HttpTransport(WebhookSpec(sim.url, secret=SECRET))


async def _one_then_all(client: Transport, deliveries: list[Delivery]) -> list[Outcome]:
    """The first delivery alone (its answer tells an offering transport the consumer reads
    batches), then the others together."""
    first = await client.send(deliveries[0], 2.0)
    return [first, *await _send_all(client, deliveries[1:], deadline_s=2.0)]


@pytest.mark.parametrize("transport", ["grpc", "http", "grpc-batch", "http-batch", "http-offered"])
def test_fates_over_the_wire_match_the_plan(transport: str, tmp_path: Path) -> None:
    # One HTTP answer covers its whole batch: a hanging delivery would hold its batch-mates'
    # (not when the consumer streams its results: http-offered, to a sim that reads batches).
    hang = 0.0 if transport == "http-batch" else 0.05
    behaviour = Behaviour(dead_ratio=0.2, retry_ratio=0.2, hang_ratio=hang, seed=3)
    record = tmp_path / "record.csv"
    kind: Literal["grpc", "http"] = "http" if transport.startswith("http") else "grpc"
    offered = transport == "http-offered"
    settings = SimSettings(kind, behaviour, SECRET, str(record), reads_batches=offered)
    deliveries = [delivery(n, seq=n % 2 == 0) for n in range(200)]
    with SimConsumer(settings) as sim:
        client = _client(transport, sim)
        sending = _one_then_all(client, deliveries) if offered else _send_all(client, deliveries)
        outcomes = asyncio.run(sending)
        assert sim.received == 200
        if offered:
            assert isinstance(client, HttpBatchTransport) and client.batching
    for d, outcome in zip(deliveries, outcomes, strict=True):
        fate = plan(behaviour, d.id, 1).fate
        assert outcome.kind is EXPECTED.get(fate, OutcomeKind.RETRY), (d.id, fate, outcome)
        if fate is Fate.HANG:
            assert "deadline" in outcome.reason
    rows = {r.delivery_id: r for r in read_records(record)}
    assert len(rows) == 200
    assert {r.attempt for r in rows.values()} == {1}
    if transport in {"http", "http-offered"}:
        return  # the HTTP transport does not forward siding-* Kafka headers (reserved prefix)
    assert rows["orders/0/4"].seq == 4
    assert rows["orders/0/4"].produced_s == 1700000000.5
    assert rows["orders/0/5"].seq is None  # no headers, empty fields
    assert rows["orders/0/5"].produced_s is None


def test_http_refuses_a_bad_signature_as_unauthorised() -> None:
    with SimConsumer(SimSettings("http", webhook_secret=SECRET)) as sim:
        wrong = "whsec_" + "b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="
        outcomes = asyncio.run(
            _send_all(HttpTransport(WebhookSpec(sim.url, secret=wrong)), [delivery(1)])
        )
    assert outcomes[0].kind is OutcomeKind.BACKOFF
    assert "401" in outcomes[0].reason


def test_retry_retry_then_ack() -> None:
    settings = SimSettings(behaviour=Behaviour(retry_ratio=1.0, retry_until_attempt=3))
    with SimConsumer(settings) as sim:
        attempts = [delivery(1, attempt=a) for a in (1, 2, 3)]
        outcomes = [
            asyncio.run(_send_all(GrpcUnaryTransport(ChannelSpec(sim.target)), [d]))[0]
            for d in attempts
        ]
    assert [o.kind for o in outcomes] == [OutcomeKind.RETRY, OutcomeKind.RETRY, OutcomeKind.ACK]


def test_the_record_is_readable_while_running(tmp_path: Path) -> None:
    record = tmp_path / "record.csv"
    with SimConsumer(SimSettings(record=str(record))) as sim:
        asyncio.run(_send_all(GrpcUnaryTransport(ChannelSpec(sim.target)), [delivery(1)]))
        rows = wait_until(lambda: read_records(record), timeout_s=5, what="a record line")
        assert rows[0].delivery_id == "orders/0/1"


def test_stop_and_start_again_on_the_same_port() -> None:
    sim = SimConsumer().start()
    try:
        target = sim.target
        first = asyncio.run(_send_all(GrpcUnaryTransport(ChannelSpec(target)), [delivery(1)]))[0]
        sim.stop()
        down = asyncio.run(_send_all(GrpcUnaryTransport(ChannelSpec(target)), [delivery(2)]))[0]
        sim.start()
        assert sim.target == target
        back = asyncio.run(_send_all(GrpcUnaryTransport(ChannelSpec(target)), [delivery(3)]))[0]
    finally:
        sim.stop()
    assert [first.kind, down.kind, back.kind] == [
        OutcomeKind.ACK,
        OutcomeKind.BACKOFF,
        OutcomeKind.ACK,
    ]


def test_a_sim_process_runs_the_cli_and_restarts_on_its_port() -> None:
    settings = SimSettings("http", Behaviour(dead_ratio=1.0), webhook_secret=SECRET)
    with SimConsumerProcess(settings) as sim:
        url = sim.url
        first = asyncio.run(
            _send_all(HttpTransport(WebhookSpec(url, secret=SECRET)), [delivery(1)])
        )[0]
        sim.stop()
        down = asyncio.run(
            _send_all(HttpTransport(WebhookSpec(url, secret=SECRET)), [delivery(2)])
        )[0]
        sim.start()
        back = asyncio.run(
            _send_all(HttpTransport(WebhookSpec(sim.url, secret=SECRET)), [delivery(3)])
        )[0]
    assert sim.url == url
    assert [first.kind, down.kind, back.kind] == [
        OutcomeKind.DEAD,
        OutcomeKind.BACKOFF,
        OutcomeKind.DEAD,
    ]


def test_plan_is_a_value() -> None:
    assert plan(Behaviour(), "x", 1) == Plan(Fate.ACK, 0.0)


def test_a_line_cut_by_a_kill_neither_breaks_the_reader_nor_swallows_the_next_line(
    tmp_path: Path,
) -> None:
    # Given a record file whose writer was killed in the middle of a line (seen in make test,
    # after a SIGKILL, as "31test-..." in the seq column)
    path = tmp_path / "received.csv"
    whole = record_line("t/0/1", 1, 100.0, {SEQ_HEADER: "1"})
    cut = record_line("t/0/2", 1, 101.0, {SEQ_HEADER: "31"})[:-1]
    path.write_text(whole + cut)
    # When the restarted consumer records its next delivery
    recorder = Recorder(path)
    recorder.write(record_line("t/0/3", 1, 102.0, {SEQ_HEADER: "33"}))
    recorder.close()
    # Then the reader gives both whole lines; the cut one is on its own line, not glued to the next
    got = read_records(path)
    assert [r.delivery_id for r in got if r.delivery_id != "t/0/2"] == ["t/0/1", "t/0/3"]
    assert got[-1].seq == 33
    # and a line cut in its middle is skipped, not a ValueError
    path.write_text(whole + "t/0/4,1,10x\n" + whole)
    assert [r.delivery_id for r in read_records(path)] == ["t/0/1", "t/0/1"]
