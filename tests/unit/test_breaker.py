"""The breaker's state machine as a pure function, driven by a fake clock (plain numbers)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siding.dispatch.breaker import (
    Answered,
    BreakerEvent,
    BreakerSettings,
    BreakerState,
    BreakerStatus,
    Probed,
    Tick,
    Tripped,
    transition,
)
from siding.errors import ConfigError
from siding.model import Outcome, OutcomeKind
from siding.transport.outcomes import lost, not_there, outcome_from_connection_error

SETTINGS = BreakerSettings(failure_threshold=3, open_for_s=2.0, max_open_for_s=10.0)
CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
BACKOFF = Answered(OutcomeKind.BACKOFF)


def run(
    events: list[tuple[float, BreakerEvent]], start: BreakerStatus | None = None
) -> BreakerStatus:
    status = start or BreakerStatus()
    for now, event in events:
        status = transition(status, event, now, SETTINGS)
    return status


def test_opens_after_threshold_consecutive_backoffs() -> None:
    # Given two BACKOFFs, the breaker is still closed
    two = run([(0.0, BACKOFF), (0.1, BACKOFF)])
    assert two == BreakerStatus(CLOSED, failures=2)
    # When a third arrives, it opens for open_for_s
    three = run([(0.2, BACKOFF)], start=two)
    assert three == BreakerStatus(OPEN, failures=0, open_for_s=2.0, open_until=2.2)


@pytest.mark.parametrize(
    "kind", [OutcomeKind.ACK, OutcomeKind.RETRY, OutcomeKind.DEAD, OutcomeKind.GONE]
)
def test_any_other_answer_resets_the_count(kind: OutcomeKind) -> None:
    status = run([(0.0, BACKOFF), (0.1, BACKOFF), (0.2, Answered(kind)), (0.3, BACKOFF)])
    assert status == BreakerStatus(CLOSED, failures=1)


def test_open_becomes_half_open_only_when_its_time_is_up() -> None:
    opened = BreakerStatus(OPEN, open_for_s=2.0, open_until=5.0)
    assert transition(opened, Tick(), 4.999, SETTINGS) == opened
    assert transition(opened, Tick(), 5.0, SETTINGS).state is HALF_OPEN


@pytest.mark.parametrize("kind", list(OutcomeKind))
def test_answers_while_open_or_half_open_change_nothing(kind: OutcomeKind) -> None:
    opened = BreakerStatus(OPEN, open_for_s=2.0, open_until=5.0)
    half = BreakerStatus(HALF_OPEN, open_for_s=2.0, open_until=5.0)
    assert transition(opened, Answered(kind), 6.0, SETTINGS) == opened
    assert transition(half, Answered(kind), 6.0, SETTINGS) == half


def test_successful_probe_closes_and_forgets_the_open_time() -> None:
    half = BreakerStatus(HALF_OPEN, open_for_s=8.0, open_until=5.0)
    assert transition(half, Probed(ok=True), 6.0, SETTINGS) == BreakerStatus()


def test_failed_probes_double_the_open_time_up_to_the_cap() -> None:
    status = BreakerStatus(HALF_OPEN, open_for_s=2.0, open_until=0.0)
    seen = []
    now = 0.0
    for _ in range(4):
        status = transition(status, Probed(ok=False), now, SETTINGS)
        seen.append(status.open_for_s)
        assert status.state is OPEN
        assert status.open_until == now + status.open_for_s
        now = status.open_until
        status = transition(status, Tick(), now, SETTINGS)
        assert status.state is HALF_OPEN
    assert seen == [4.0, 8.0, 10.0, 10.0]


def test_probe_results_outside_half_open_are_ignored() -> None:
    opened = BreakerStatus(OPEN, open_for_s=2.0, open_until=5.0)
    assert transition(opened, Probed(ok=True), 1.0, SETTINGS) == opened
    assert transition(BreakerStatus(), Probed(ok=False), 1.0, SETTINGS) == BreakerStatus()


def test_reopening_after_a_close_starts_from_open_for_s_again() -> None:
    # Given a breaker that backed off to 8 s and then closed
    closed = transition(
        BreakerStatus(HALF_OPEN, open_for_s=8.0, open_until=0.0), Probed(ok=True), 0.0, SETTINGS
    )
    # When it trips again
    status = run([(1.0, BACKOFF), (1.1, BACKOFF), (1.2, BACKOFF)], start=closed)
    # Then it is open for the base time, not the doubled one
    assert status.open_for_s == 2.0


events = st.one_of(
    st.sampled_from(list(OutcomeKind)).map(Answered),
    st.just(Answered(OutcomeKind.BACKOFF, down=True)),
    st.just(Tick()),
    st.booleans().map(Probed),
    st.just(Tripped()),
)


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1.0), events), max_size=60))
def test_invariants_hold_for_any_event_sequence(steps: list[tuple[float, BreakerEvent]]) -> None:
    status = BreakerStatus()
    now = 0.0
    for dt, event in steps:
        now += dt
        status = transition(status, event, now, SETTINGS)
        if status.state is CLOSED:
            assert 0 <= status.failures < SETTINGS.failure_threshold
            assert status.failures or not status.down
        else:
            assert status.failures == 0
            if status.death:  # a death keeps its pace, however many probes fail
                assert status.open_for_s == min(SETTINGS.open_for_s, SETTINGS.death_probe_s)
            else:
                assert SETTINGS.open_for_s <= status.open_for_s <= SETTINGS.max_open_for_s


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"failure_threshold": 0}, "breaker.failure_threshold"),
        ({"open_for_s": 0}, "breaker.open_for_s"),
        ({"open_for_s": 5, "max_open_for_s": 1}, "breaker.max_open_for_s"),
        ({"probe_timeout_s": 0}, "breaker.probe_timeout_s"),
        ({"death_probe_s": 0}, "breaker.death_probe_s"),
    ],
)
def test_bad_settings_name_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BreakerSettings(**kwargs)
    assert caught.value.key == key


def test_a_trip_opens_a_closed_breaker_at_once_and_changes_nothing_else() -> None:
    # The consumer died on a message sent to it alone: it is down, whatever the count says
    assert run([(1.0, Tripped())]) == BreakerStatus(OPEN, 0, 1.0, 2.0, death=True)
    already = BreakerStatus(OPEN, 0, 8.0, 9.0)
    assert run([(1.0, Tripped())], start=already) == already
    probing = BreakerStatus(HALF_OPEN, 0, 8.0, 9.0)
    assert run([(10.0, Tripped())], start=probing) == probing


def test_after_a_death_failed_probes_keep_a_steady_pace() -> None:
    # The crash pill's slow mode (issue 27): a worker's breaker opened by a death probes while the
    # consumer restarts, or just as the pill (sent alone by another worker) kills it anew. Each
    # failed probe used to double the wait (5, 10, 20 s): innocents waited for the conviction.
    status = run([(0.0, Tripped())])
    opened_at = []
    now = 0.0
    for _ in range(4):  # four probes that meet the consumer down
        now = status.open_until
        status = transition(status, Tick(), now, SETTINGS)
        assert status.state is HALF_OPEN
        now += 0.5  # the probe waited for the channel, then failed
        status = transition(status, Probed(ok=False), now, SETTINGS)
        opened_at.append(status.open_for_s)
    assert opened_at == [1.0, 1.0, 1.0, 1.0]
    assert status.death
    # And the first good probe closes it, forgetting the death
    status = transition(
        transition(status, Tick(), status.open_until, SETTINGS),
        Probed(ok=True),
        status.open_until,
        SETTINGS,
    )
    assert status == BreakerStatus()


def test_an_overload_still_backs_off() -> None:
    # BACKOFF answers (an overloaded or unreachable consumer) open it; failed probes double it
    status = run([(0.0, BACKOFF), (0.1, BACKOFF), (0.2, BACKOFF)])
    assert not status.death
    status = transition(transition(status, Tick(), 2.2, SETTINGS), Probed(ok=False), 2.3, SETTINGS)
    assert status.open_for_s == 4.0 and not status.death


def test_the_death_pace_is_never_longer_than_open_for() -> None:
    short = BreakerSettings(open_for_s=0.5, max_open_for_s=10.0)
    assert transition(BreakerStatus(), Tripped(), 0.0, short).open_for_s == 0.5


DOWN = Answered(OutcomeKind.BACKOFF, down=True)  # a lost call, a refused connection


def test_failures_that_say_the_consumer_is_not_there_open_it_at_the_death_pace() -> None:
    # The crash pill (issue 27, stop 36): the pill, sent alone by the park lane's worker, kills
    # the consumer; the main lane's worker learns it from its lost calls or refused connections.
    # Its breaker opened on those BACKOFFs for open_for (5 s by default) while the consumer was
    # back in 3.1-3.5 s: every death held the main line 1.5-1.9 s longer than the restart.
    status = run([(0.0, DOWN), (0.0, BACKOFF), (0.1, BACKOFF)])
    assert status == BreakerStatus(OPEN, 0, 1.0, 1.1, death=True)
    # and its failed probes keep that pace
    status = transition(transition(status, Tick(), 1.1, SETTINGS), Probed(ok=False), 1.5, SETTINGS)
    assert (status.open_for_s, status.death) == (1.0, True)


def test_a_not_there_is_forgotten_once_the_consumer_answers() -> None:
    status = run([(0.0, DOWN), (0.1, Answered(OutcomeKind.ACK)), (0.2, BACKOFF), (0.3, BACKOFF)])
    assert status == BreakerStatus(CLOSED, failures=2)
    status = transition(status, BACKOFF, 0.4, SETTINGS)
    assert (status.open_for_s, status.death) == (2.0, False)  # an overload: open_for, doubling


def test_one_not_there_alone_does_not_open_it() -> None:
    # a single broken connection is not an outage: the threshold still counts
    assert run([(0.0, DOWN)]) == BreakerStatus(CLOSED, failures=1, down=True)


def test_not_there_is_a_lost_call_or_a_refused_connection_never_a_slow_down() -> None:
    assert not_there(lost("stream broke: grpc UNAVAILABLE: Socket closed"))
    assert not_there(outcome_from_connection_error(ConnectionRefusedError("refused")))
    assert not not_there(Outcome(OutcomeKind.BACKOFF, "http 503"))
    assert not not_there(Outcome(OutcomeKind.BACKOFF, "grpc RESOURCE_EXHAUSTED"))
    assert not not_there(Outcome(OutcomeKind.RETRY, "deadline of 1s exceeded", no_answer=True))


def test_after_a_death_a_probe_that_waited_its_whole_timeout_is_followed_at_once() -> None:
    # A gRPC probe waits for the channel up to 2 s. Reopening for 1 s after it left the consumer
    # unprobed for a second after it came back (stop 36's runs: the main lane's worker closed
    # 1-2 s after the consumer's restart); probes now start at a steady pace from each other.
    status = run([(0.0, Tripped())])  # open until 1.0
    status = transition(status, Tick(), 1.0, SETTINGS)
    waited = transition(status, Probed(ok=False), 3.0, SETTINGS)  # waited 2 s, failed
    assert (waited.state, waited.open_until, waited.death) == (OPEN, 3.0, True)
    assert transition(waited, Tick(), 3.0, SETTINGS).state is HALF_OPEN
    # and a probe that fails at once waits for the rest of the pace
    status = transition(transition(waited, Tick(), 3.0, SETTINGS), Probed(ok=False), 3.1, SETTINGS)
    assert (status.open_until, status.open_for_s) == (4.0, 1.0)
