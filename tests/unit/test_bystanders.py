"""Calls that die beside a suspect out at the endpoint are bystanders, not suspects (issue 27,
item 4): the board's rule, its shared file, and the window."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from siding.dispatch import BreakerSettings, DispatchSettings, Work, dispatch
from siding.dispatch.board import SIGHTINGS, LocalBoard, Seen, Sighting, was_out_with
from siding.dispatch.breaker import CircuitBreaker
from siding.dispatch.work import DispatchReport
from siding.model import ACK, Delivery, Lane, delivery_id
from siding.pipeline.executor.board import SharedBoard, board_path
from siding.steps import Done, ToDlq
from siding.transport.fake import CrashingTransport, ScriptedTransport
from siding.transport.outcomes import lost

# --- the rule ------------------------------------------------------------------------------------


def test_a_call_out_while_a_suspect_was_out_or_died_is_a_bystander() -> None:
    # The suspect went out at 10 and died at 12: a call out from 11 to 12.1 died with it
    died = Sighting(10.0, 12.0, Seen.DIED)
    assert was_out_with([died], started=11.0, lost_at=12.1)
    assert was_out_with([died], started=9.0, lost_at=10.5)
    # A call sent after the suspect's death, lost later, died of something else
    assert not was_out_with([died], started=12.5, lost_at=14.0)
    # A call lost before the suspect went out
    assert not was_out_with([died], started=8.0, lost_at=9.5)
    # A suspect still out counts until its bound
    out = Sighting(10.0, 13.0, Seen.OUT)
    assert was_out_with([out], started=11.0, lost_at=11.5)
    assert not was_out_with([out], started=13.5, lost_at=14.0)


def test_a_suspect_that_was_answered_excuses_no_one() -> None:
    # Answered, it was not out at the death (the death would have taken it)
    assert not was_out_with([Sighting(10.0, 12.0, Seen.ENDED)], started=11.0, lost_at=11.5)
    assert not was_out_with([], started=11.0, lost_at=11.5)


def test_the_local_board_marks_and_ends_sightings_and_keeps_a_ring_of_them() -> None:
    now = [100.0]
    board = LocalBoard(clock=lambda: now[0])
    mark = board.out(until=130.0)
    assert board.was_out_with(started=99.0, lost_at=101.0)
    now[0] = 102.0
    board.ended(mark, died=False)
    assert not board.was_out_with(started=99.0, lost_at=101.0)
    second = board.out(until=130.0)
    now[0] = 103.0
    board.ended(second, died=True)
    assert board.was_out_with(started=101.0, lost_at=104.0)
    # A ring's worth later, the old sightings are gone; ending a forgotten mark does nothing
    for _ in range(SIGHTINGS):
        board.ended(board.out(until=130.0), died=False)
    board.ended(second, died=True)
    assert not board.was_out_with(started=101.0, lost_at=104.0)


# --- the file every worker of a machine shares ---------------------------------------------------

_CHILD = """
import sys, time
from pathlib import Path
from siding.pipeline.executor.board import SharedBoard
board = SharedBoard(Path(sys.argv[1]))
gone = board.out(until=time.monotonic() + 0.5)  # dies with it out: OUT until its bound
died = board.out(until=time.monotonic() + 60)
board.ended(died, died=True)
print(time.monotonic(), flush=True)
"""


def test_a_sighting_written_by_another_worker_is_seen_and_a_dead_worker_s_expires(
    tmp_path: Path,
) -> None:
    path = board_path(tmp_path, "http://consumer:8080/hook")
    assert board_path(tmp_path, "http://consumer:8080/hook") == path
    assert board_path(tmp_path, "http://other:8080/hook") != path
    before = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], check=True, capture_output=True, text=True
    )
    written_at = float(done.stdout)
    board = SharedBoard(path)
    # The death it recorded excuses a call that was out then, in this process
    assert board.was_out_with(started=before, lost_at=written_at + 0.01)
    # The suspect its worker died with counts until the bound written with it, not forever
    assert board.was_out_with(started=written_at + 0.1, lost_at=written_at + 0.2)
    gone_bound = written_at + 0.5
    assert not board.was_out_with(started=gone_bound + 0.1, lost_at=gone_bound + 0.2)


# --- the window ----------------------------------------------------------------------------------

FAST_BREAKER = BreakerSettings(failure_threshold=3, open_for_s=0.02, max_open_for_s=0.05)
# The pill goes again 0.5 s after each restart, so the consumer serves others in between.
SETTINGS = DispatchSettings(
    max_in_flight=10,
    deadline_s=2.0,
    lanes=(Lane(delay_s=10.0, deadline_s=5.0),),
    breaker=FAST_BREAKER,
    recovery_s=0.5,
    suspect_spread_s=0.05,
)


def items(n: int, start: int = 0, deaths: int = 0) -> list[Work]:
    return [
        Work(
            Delivery(delivery_id("trips", 0, i), "trips", 0, i, None, f"v{i}".encode()),
            deaths=deaths,
        )
        for i in range(start, start + n)
    ]


async def test_the_main_lane_s_calls_that_die_with_the_park_lane_s_suspect_are_not_suspected() -> (
    None
):
    # Given one consumer, a park-lane window isolating a pill (a suspect since a crowd's death)
    # and a main-lane window with 10 calls of 0.1 s out whenever the pill goes, one board
    # between them (and one breaker: one worker's)
    board = LocalBoard()
    pill = items(1, start=1_000, deaths=1)
    pill_id = pill[0].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill_id, latency_s=0.1, restart_s=0.05)
    breaker = CircuitBreaker(FAST_BREAKER, consumer.probe)
    main = items(200)

    async def main_lane() -> DispatchReport:
        await asyncio.sleep(0.05)  # its calls are out when the pill goes
        return await dispatch(consumer, main, SETTINGS, board=board, breaker=breaker)

    park, lane = await asyncio.wait_for(
        asyncio.gather(
            dispatch(consumer, pill, SETTINGS, board=board, breaker=breaker), main_lane()
        ),
        30,
    )
    # Then the pill is convicted on its lone deaths, and the main lane's calls that died with it
    # went again as after any outage: none became a suspect, every one is done
    assert isinstance(park.settled[0].step, ToDlq)
    assert consumer.deaths >= 2
    assert lane.stats.excused >= 1
    assert lane.stats.suspected == 0
    assert all(isinstance(s.step, Done) for s in lane.settled)


async def test_without_a_shared_board_the_same_calls_become_suspects() -> None:
    # The control: each window with its own board (the code before the board)
    pill = items(1, start=1_000, deaths=1)
    pill_id = pill[0].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill_id, latency_s=0.1, restart_s=0.05)
    breaker = CircuitBreaker(FAST_BREAKER, consumer.probe)

    async def main_lane() -> DispatchReport:
        await asyncio.sleep(0.05)
        return await dispatch(consumer, items(200), SETTINGS, breaker=breaker)

    _, lane = await asyncio.wait_for(
        asyncio.gather(dispatch(consumer, pill, SETTINGS, breaker=breaker), main_lane()), 30
    )
    # (the main lane's calls out at the pill's lone death became suspects; its own suspects'
    # isolation then excuses its calls that die beside them, on its own board)
    assert lane.stats.suspected >= 1


async def test_a_call_is_excused_once_and_suspected_when_it_dies_again() -> None:
    # Given a suspect out elsewhere for the whole test, and a message lost at its first two sends
    board = LocalBoard()
    board.out(until=time.monotonic() + 60)
    work = items(5)
    target = work[2].delivery.id
    consumer = ScriptedTransport({target: [lost("gone"), lost("gone again"), ACK]})
    report = await asyncio.wait_for(
        dispatch(consumer, work, replace(SETTINGS, max_in_flight=5), board=board), 10
    )
    # Then the first death is excused, the second makes it a suspect (never a free pass), and
    # it is delivered in the end
    assert report.stats.excused == 1
    assert report.stats.suspected == 1
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert [d.id for d in consumer.started].count(target) == 3
