"""Poison pills that kill the consumer (issue 18): suspects, isolation, conviction.

The rules are pure (``Suspects``); the window is driven against ``CrashingTransport``, a fake
consumer that dies on some messages and is restarted by a supervisor.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from siding.dispatch import BreakerSettings, DispatchSettings, Work, dispatch, trace, window
from siding.dispatch.parking import ParkSettings
from siding.dispatch.suspects import Suspects
from siding.model import Delivery, Lane, Ordering, delivery_id
from siding.steps import Done, Parked, ToDlq
from siding.transport.fake import CrashingTransport

LANES = (Lane(delay_s=10.0, deadline_s=5.0),)
FAST_BREAKER = BreakerSettings(failure_threshold=3, open_for_s=0.02, max_open_for_s=0.05)
SETTINGS = DispatchSettings(
    max_in_flight=10,
    deadline_s=2.0,
    lanes=LANES,
    breaker=FAST_BREAKER,
    recovery_s=0.05,
    suspect_spread_s=0.2,
)


def items(n: int, keys: int = 0) -> list[Work]:
    def key(i: int) -> bytes | None:
        return str(i % keys).encode() if keys else None

    return [
        Work(Delivery(delivery_id("trips", 0, i), "trips", 0, i, key(i), f"v{i}".encode()))
        for i in range(n)
    ]


# --- the pure rules -----------------------------------------------------------------------------


def take(s: Suspects, now: float = 0.0) -> int | None:
    index, _ = s.take(0, now)
    return index


def test_a_suspect_alone_at_crash_limit_deaths_is_convicted_once_others_were_served() -> None:
    s = Suspects(crash_limit=2)
    assert s.died(7, served=0) is None  # out with others: a suspect, one death
    assert 7 in s and s.suspected == 1
    s.wait(7, 0)
    assert take(s) == 7
    assert s.died(7, served=1) is None  # alone once; the consumer answered someone else
    s.wait(7, 0)
    assert take(s) == 7
    conviction = s.died(7, served=1)
    assert conviction is not None and (conviction.deaths, conviction.lone) == (3, 2)
    assert "the consumer died 3 times while handling this message" in conviction.reason("x")
    assert 7 not in s and s.convicted == 1 and s.isolations == 2


def test_no_conviction_while_no_other_message_is_answered() -> None:
    # Every message dies the same way: an outage, the breaker's business, not the DLQ's.
    s = Suspects(crash_limit=1)
    s.died(3, served=4)
    for _ in range(5):
        s.wait(3, 0)
        assert take(s) == 3
        assert s.died(3, served=4) is None
    assert 3 in s and s.convicted == 0


def test_suspects_follow_each_other_after_a_solo_time_the_most_suspicious_first() -> None:
    s = Suspects(crash_limit=3, solo_s=0.1)
    for index in (4, 2, 9):
        s.died(index, 0)
    s.wait(4, 0)
    s.wait(2, 0)
    s.wait(9, 50)
    assert s.take(0, now=0.0) == (2, None)  # equal deaths: the earliest
    waiting, wait_s = s.take(0, now=0.04)  # the first is alone for its solo time
    assert waiting is None and wait_s == pytest.approx(0.06)
    assert s.take(0, now=0.1) == (4, None)
    assert s.take(0, now=0.3) == (None, None)  # 9 is not due yet
    s.answered(2)  # answered: cleared
    assert 2 not in s and s.out == {4}


def test_suspects_out_together_at_a_death_must_each_prove_themselves_alone() -> None:
    s = Suspects(crash_limit=3, solo_s=0.1)
    for index in (1, 2, 3):
        s.died(index, 0)
        s.wait(index, 0)
    assert take(s, 0.0) == 1
    assert take(s, 0.2) == 2
    # the consumer dies with both out: no lone death for either, both now exclusive
    s.died(1, 0)
    s.died(2, 0)
    s.wait(1, 0)
    s.wait(2, 0)
    assert take(s, 0.3) == 1  # the most deaths first
    assert s.take(0, 5.0) == (None, None)  # 1 is exclusive: nobody follows it
    s.died(1, 0)  # alone: a lone death
    s.wait(1, 0)
    assert take(s, 6.0) == 1  # the most lone deaths first


def test_asking_who_is_next_changes_nothing() -> None:
    # The window asks before it takes a slot of the route's budget (docs/dispatch.md, "One
    # budget"): the answer is what ``take`` would say, and asking again says it again
    s = Suspects(crash_limit=3, solo_s=0.1)
    for index in (1, 2):
        s.died(index, 0)
        s.wait(index, 0)
    assert s.next_up(0, 0.0) == s.next_up(0, 0.0) == (1, None)
    assert take(s, 0.0) == 1
    waiting, left = s.next_up(0, 0.04)  # 1 has not been out alone for its solo time yet
    assert waiting is None and left == pytest.approx(0.06)
    assert s.out == {1} and s.waiting() == [2] and s.isolations == 1
    assert s.next_up(0, 0.1) == (2, None) and s.out == {1}
    assert take(s, 0.1) == 2 and s.out == {1, 2}


def test_a_suspect_turned_away_keeps_its_suspicion_and_leaves_the_slot() -> None:
    s = Suspects(crash_limit=3)
    s.died(1, 0)
    s.wait(1, 0)
    assert take(s) == 1
    s.refused(1)
    assert 1 in s and not s.out


def test_a_message_that_arrives_suspected_is_isolated_from_the_start() -> None:
    s = Suspects(crash_limit=3)
    s.seed(5, deaths=1, served=0)
    s.seed(6, deaths=0, served=0)
    assert 5 in s and 6 not in s


# --- the window -------------------------------------------------------------------------------


async def test_the_pill_is_convicted_and_every_other_message_is_delivered() -> None:
    # Given a consumer that dies on one message and comes back 50 ms later
    work = items(200)
    pill = work[57].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill)
    # When the slice is dispatched
    report = await asyncio.wait_for(dispatch(consumer, work, SETTINGS), 20)
    # Then the pill is in the DLQ after at most crash_limit + 2 deaths, and nothing else is
    steps = {s.work.delivery.id: s.step for s in report.settled}
    step = steps.pop(pill)
    assert isinstance(step, ToDlq)
    assert "the consumer died" in step.reason and "while handling this message" in step.reason
    assert all(isinstance(s, Done) for s in steps.values())
    assert consumer.deaths <= SETTINGS.crash_limit + 2
    assert report.stats.convicted == 1
    assert report.stats.suspected >= 1 and report.stats.isolations >= SETTINGS.crash_limit
    # and duplicates are bounded by what was out at the deaths
    duplicates = sum(n - 1 for i, n in consumer.received.items() if i != pill)
    assert duplicates <= consumer.deaths * SETTINGS.max_in_flight


async def test_a_consumer_that_dies_on_everything_for_a_while_dead_letters_nothing() -> None:
    # Given a consumer that dies on whatever it receives for 0.5 s (a bad deploy), then recovers
    until = time.monotonic() + 0.5
    consumer = CrashingTransport(lambda _: time.monotonic() < until, restart_s=0.02)
    work = items(100)
    # When the slice is dispatched
    report = await asyncio.wait_for(dispatch(consumer, work, SETTINGS), 20)
    # Then nothing is dead-lettered: every message died the same way
    assert consumer.deaths >= 3
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.stats.convicted == 0


async def test_two_pills_of_two_keys_are_convicted_and_their_keys_stay_in_order() -> None:
    # Given key mode, 10 keys, and one pill in each of two keys
    work = items(120, keys=10)
    pills = {work[23].delivery.id, work[41].delivery.id}  # keys 3 and 1
    consumer = CrashingTransport(lambda d: d.id in pills)
    settings = DispatchSettings(
        max_in_flight=10,
        deadline_s=2.0,
        lanes=LANES,
        breaker=FAST_BREAKER,
        ordering=Ordering.KEY,
        recovery_s=0.05,
        suspect_spread_s=0.2,
    )
    # When the slice is dispatched
    report = await asyncio.wait_for(dispatch(consumer, work, settings), 30)
    # Then both pills are in the DLQ, every other message is done
    dead = {s.work.delivery.id for s in report.settled if isinstance(s.step, ToDlq)}
    assert dead == pills
    assert len(report.done) == 118
    assert consumer.deaths <= 2 * (settings.crash_limit + 2)


def dies_once_on(offset: int) -> Callable[[Delivery], bool]:
    """A crash unrelated to any message: the consumer dies the first time it gets ``offset``."""
    died = False

    def once(delivery: Delivery) -> bool:
        nonlocal died
        if delivery.offset == offset and not died:
            died = True
            return True
        return False

    return once


async def test_a_suspect_that_answers_is_cleared_without_an_attempt_spent() -> None:
    # Given a consumer that dies once, on an innocent's watch (a crash unrelated to any message)
    consumer = CrashingTransport(dies_once_on(5), latency_s=0.02)
    work = items(30)
    report = await asyncio.wait_for(dispatch(consumer, work, SETTINGS), 20)
    # Then everything is done, and each suspect went out once more, alone
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.stats.suspected >= 1 and report.stats.convicted == 0
    assert report.stats.isolations == report.stats.suspected
    assert consumer.max_out <= SETTINGS.max_in_flight


@pytest.mark.parametrize("deaths", [0, 1])
async def test_a_message_already_suspected_goes_alone(deaths: int) -> None:
    work = [Work(w.delivery, deaths=deaths if i == 0 else 0) for i, w in enumerate(items(20))]
    consumer = CrashingTransport(lambda _: False, latency_s=0.02)
    report = await asyncio.wait_for(dispatch(consumer, work, SETTINGS), 10)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.stats.isolations == deaths


async def test_slow_innocent_suspects_do_not_wait_for_each_other() -> None:
    # Given a consumer with 0.4 s calls that dies once (not because of a message) with 40 out
    consumer = CrashingTransport(dies_once_on(39), latency_s=0.4)
    settings = DispatchSettings(
        max_in_flight=200, deadline_s=2.0, lanes=LANES, breaker=FAST_BREAKER
    )
    # When the slice is dispatched: one suspect after another, each alone for its solo time
    # (one at a time until each answered would take 40 x 0.4 s)
    report = await asyncio.wait_for(dispatch(consumer, items(40), settings), 12)
    # Then all are done, none dead-lettered, and suspects were out together
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.stats.suspected == 40 and report.stats.isolations == 40


async def test_with_parking_the_suspects_left_are_handed_to_the_park_lane() -> None:
    # Given parking on (unordered), and a consumer that dies on one message
    work = items(100)
    pill = work[30].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill)
    settings = replace(SETTINGS, park=ParkSettings(enabled=True), crash_limit=10)
    # When the slice is dispatched
    report = await asyncio.wait_for(dispatch(consumer, work, settings), 10)
    # Then the batch does not wait for the isolation: once only suspects are left, each is
    # parked with its deaths (the park lane sends it alone); every other message is done
    parked = {s.work.delivery.id: s.step for s in report.settled if isinstance(s.step, Parked)}
    assert pill in parked
    assert all(step.deaths >= 1 for step in parked.values())
    assert all(isinstance(s.step, Done) for s in report.settled if s.work.delivery.id not in parked)
    assert report.stats.handed_over == len(parked)
    assert report.stats.convicted == 0


async def test_a_suspect_that_killed_the_consumer_alone_lets_it_serve_before_going_again() -> None:
    # Given a pill and a recovery time of 0.3 s
    work = items(40)
    pill = work[5].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill, restart_s=0.02)
    settings = replace(SETTINGS, recovery_s=0.3)
    report = await asyncio.wait_for(dispatch(consumer, work, settings), 20)
    # Then after each lone death it waited at least that long before it went again
    times = [at for at, i in consumer.log if i == pill]
    assert len(times) == consumer.deaths == settings.crash_limit + 1
    lone_gaps = [b - a for a, b in itertools.pairwise(times[1:])]
    assert all(gap >= 0.3 for gap in lone_gaps), lone_gaps
    assert report.stats.convicted == 1


# --- the park lane hands back a pill waiting for its next turn (issue 27, stop 36) --------------


def test_a_pill_waiting_for_its_turn_is_handed_back_with_its_lone_deaths() -> None:
    s = Suspects(crash_limit=3)
    s.seed(1, deaths=1, served=10)  # died in a crowd in the main lane
    s.wait(1, 0)
    assert take(s) == 1
    assert s.died(1, served=12) is None  # alone: the consumer had answered others since
    s.wait(1, 5_000)  # its next turn, once the consumer is back and has served a while
    # Then it may go back to the park topic, due at that turn, carrying its lone death
    assert s.to_hand_back(now_ms=3_000, served=12, min_wait_ms=1_000) == {1: 5_000}
    assert s.carried_lone(1, served=12) == 1
    # but not when its turn is close, or while another suspect is out or waiting its turn
    assert s.to_hand_back(now_ms=4_500, served=12, min_wait_ms=1_000) is None
    s.seed(2, deaths=1, served=12)
    s.wait(2, 0)
    assert s.to_hand_back(now_ms=3_000, served=12, min_wait_ms=1_000) is None
    assert take(s) == 2
    assert s.to_hand_back(now_ms=3_000, served=12, min_wait_ms=1_000) is None
    s.answered(2)
    assert s.to_hand_back(now_ms=3_000, served=13, min_wait_ms=1_000) == {1: 5_000}


def test_lone_deaths_with_no_answer_since_are_not_carried() -> None:
    # Nobody was answered since its first death: the endpoint may be down for everyone (a
    # crash-looping deploy); the count starts over elsewhere, and the batch keeps it
    s = Suspects(crash_limit=3)
    s.seed(1, deaths=1, served=4)
    s.wait(1, 0)
    assert take(s) == 1
    assert s.died(1, served=4) is None
    s.wait(1, 5_000)
    assert s.carried_lone(1, served=4) == 0
    assert s.to_hand_back(now_ms=0, served=4, min_wait_ms=1_000) is None


def test_carried_lone_deaths_count_towards_the_conviction_with_their_evidence() -> None:
    s = Suspects(crash_limit=3)
    s.seed(1, deaths=3, served=7, lone=2)
    assert s.lone(1) == 2
    s.wait(1, 0)
    assert take(s) == 1
    # the third lone death convicts, though this dispatch has seen no answer yet
    conviction = s.died(1, served=7)
    assert conviction is not None and (conviction.deaths, conviction.lone) == (4, 3)


async def test_the_park_lane_ends_its_batch_while_the_pill_waits_and_convicts_it_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a park-lane slice: a pill and 30 innocents that died with it in the main lane
    monkeypatch.setattr(window, "HAND_BACK_MIN_S", 0.1)
    work = [Work(w.delivery, deaths=1) for w in items(31)]
    pill = work[30].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill, restart_s=0.05)
    settings = replace(SETTINGS, hand_back=True, recovery_s=0.3, crash_limit=3)
    # When the park lane delivers it, batch after batch (what is handed back comes again)
    batches, convicted = 0, None
    while convicted is None:
        batches += 1
        assert batches <= 10
        report = await asyncio.wait_for(dispatch(consumer, work, settings), 10)
        if batches == 1:
            # Then the first batch ends with the innocents done and the pill handed back
            # after its first lone death, due once the consumer has served a while
            innocents = [s for s in report.settled if s.work.delivery.id != pill]
            assert all(isinstance(s.step, Done) for s in innocents)
            assert consumer.deaths == 1
        (only,) = [s for s in report.settled if s.work.delivery.id == pill]
        if isinstance(only.step, ToDlq):
            convicted = only.step
            break
        step = only.step
        assert isinstance(step, Parked) and step.lone >= 1 and step.deaths == consumer.deaths + 1
        assert report.stats.handed_over == 1
        await asyncio.sleep(max(0.0, step.not_before_ms / 1000 - time.time()))
        work = [Work(only.work.delivery, deaths=step.deaths, lone=step.lone)]
    # And the pill is convicted after crash_limit + 1 deaths (one in the crowd, three alone),
    # over several batches instead of one that held the park lane for the whole conviction
    assert "the consumer died 4 times" in convicted.reason and "3 of them" in convicted.reason
    assert consumer.deaths == 3 and batches == 3


async def test_a_death_with_calls_out_opens_the_breaker_at_the_death_pace() -> None:
    # Given a consumer that dies once with many calls out, none of them a suspect yet (the main
    # lane's worker when another worker's pill kills the consumer), and an open_for of 5 s
    consumer = CrashingTransport(dies_once_on(20), latency_s=0.05, restart_s=0.2)
    breaker = replace(FAST_BREAKER, open_for_s=5.0, max_open_for_s=10.0, death_probe_s=0.1)
    settings = replace(SETTINGS, max_in_flight=50, breaker=breaker)
    started = time.monotonic()
    report = await asyncio.wait_for(dispatch(consumer, items(40), settings), 10)
    # Then its breaker opened for the death's pace, not open_for, and the slice was done long
    # before open_for would have let it go on
    opened = [t for t in report.stats.breaker_transitions if t.after.value == "open"]
    assert opened and all(t.death and t.open_for_s == 0.1 for t in opened)
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert time.monotonic() - started < 4.0


async def test_the_trace_follows_the_pill_through_each_death(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the suspects' trace on, and a consumer that dies on one message
    monkeypatch.setenv(trace.TRACE_ENV, "1")
    work = items(40)
    pill = work[7].delivery.id
    consumer = CrashingTransport(lambda d: d.id == pill)
    # When the slice is dispatched
    report = await asyncio.wait_for(
        dispatch(consumer, work, SETTINGS, trace=trace.SuspectTrace("lane=0 batch=3 task=1")), 20
    )
    # Then each death of the pill is one "died" line of the pill, with its tally before and after
    assert report.stats.convicted == 1
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("siding-suspect ")]
    died = [x for x in lines if x.split()[1:3] == ["died", pill]]
    assert len(died) == consumer.deaths
    assert [f"deaths={n}->{n + 1}" in x for n, x in enumerate(died)] == [True] * len(died)
    assert "convicted=True" in died[-1] and "convicted=False" in died[0]
    assert all(" lane=0 batch=3 task=1 pid=" in x for x in died)
    sends = [x for x in lines if x.split()[1:3] == ["send", pill]]
    assert len(sends) >= SETTINGS.crash_limit  # isolated: each lone death followed a send


def test_a_trace_line_names_the_event_the_record_and_where() -> None:
    where = "lane=park batch=12 task=0 pid=7"
    assert (
        trace.line(where, "died", "t/0/1", {"deaths": "1->2", "lone": "0->1"})
        == "siding-suspect died t/0/1 lane=park batch=12 task=0 pid=7 deaths=1->2 lone=0->1"
    )
