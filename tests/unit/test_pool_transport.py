"""The pool transport over a route's consumer instances (docs/registration.md): who gets a
delivery, and what an instance that is unreachable, killed or gone does to its deliveries."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.config import Endpoint
from siding.dispatch import DispatchSettings, Work, dispatch
from siding.model import ACK, Delivery, Outcome, OutcomeKind
from siding.steps import Done
from siding.transport.base import Transport
from siding.transport.fake import ScriptedTransport
from siding.transport.outcomes import lost, never_reached, outcome_from_connection_error
from siding.transport.pool import Load, Member, PoolTransport, down_for, pick


def delivery(n: int) -> Delivery:
    return Delivery(f"t/0/{n}", "t", 0, n, None, b"v")


def member(n: int, capacity: int = 100) -> Member:
    return Member(f"m{n}", Endpoint.parse(f"grpc://127.0.0.1:{5000 + n}"), capacity)


class Instance:
    """A consumer instance: answers ACK after ``latency_s``; ``kill()`` breaks every call out
    (``lost``) and refuses every later one, as a process killed with SIGKILL does."""

    def __init__(self, latency_s: float = 0.01) -> None:
        self.latency_s = latency_s
        self.dead = False
        self.received: list[str] = []
        self.closed = False
        self._out: set[asyncio.Future[Outcome]] = set()

    async def send(self, d: Delivery, deadline_s: float) -> Outcome:  # noqa: ARG002
        if self.dead:
            return outcome_from_connection_error(ConnectionRefusedError("refused"))
        self.received.append(d.id)
        call: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._out.add(call)
        try:
            return await asyncio.wait_for(call, self.latency_s)
        except TimeoutError:
            return ACK
        finally:
            self._out.discard(call)

    def kill(self) -> None:
        self.dead = True
        for call in self._out:
            if not call.done():
                call.set_result(lost("grpc UNAVAILABLE: Socket closed"))

    async def probe(self) -> bool:
        return not self.dead

    async def close(self) -> None:
        self.closed = True


class Registry:
    """What the worker's feed gives a pool: a versioned list of members."""

    def __init__(self, members: Sequence[Member] = ()) -> None:
        self.version = 1
        self.members = list(members)

    def __call__(self) -> tuple[int, Sequence[Member]]:
        return self.version, tuple(self.members)

    def set(self, members: Sequence[Member]) -> None:
        self.members = list(members)
        self.version += 1


def pool_of(registry: Registry, transports: dict[str, Transport]) -> PoolTransport:
    by_port = {m.endpoint.port: m.id for m in registry.members}
    return PoolTransport(registry, lambda e: transports[by_port[e.port]], name="r")


# -- the choice ----------------------------------------------------------------------------------

PICKS = [
    ([Load(0, 100), Load(0, 100)], 0, 0),
    ([Load(0, 100), Load(0, 100)], 1, 1),
    ([Load(3, 100), Load(1, 100)], 0, 1),
    ([Load(1, 100), Load(1, 200)], 0, 1),  # twice the capacity: more work before it weighs as much
    ([Load(4, 200), Load(1, 100)], 0, 1),
    ([Load(3, 200), Load(1, 100)], 0, 0),  # a tie: the first from start
    ([Load(0, 100, available=False), Load(9, 100)], 0, 1),
    ([Load(0, 100, available=False)], 0, None),
    ([], 0, None),
]


@pytest.mark.parametrize(("loads", "start", "chosen"), PICKS)
def test_the_least_loaded_available_instance_is_picked(
    loads: list[Load], start: int, chosen: int | None
) -> None:
    assert pick(loads, start) == chosen


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 500), st.booleans()), min_size=1, max_size=8
    ),
    st.integers(0, 20),
)
def test_no_available_instance_weighs_less_than_the_one_picked(
    rows: list[tuple[int, int, bool]], start: int
) -> None:
    loads = [Load(o, c, a) for o, c, a in rows]
    chosen = pick(loads, start)
    available = [i for i, load in enumerate(loads) if load.available]
    assert (chosen is None) == (not available)
    if chosen is not None:
        weight = (loads[chosen].outstanding + 1) / loads[chosen].capacity
        assert all((loads[i].outstanding + 1) / loads[i].capacity >= weight for i in available)


def test_an_instance_that_fails_again_is_set_aside_longer_up_to_a_limit() -> None:
    assert [down_for(n) for n in (1, 2, 3, 4, 5, 9)] == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0]


def test_never_reached_is_only_a_delivery_that_did_not_leave() -> None:
    assert never_reached(outcome_from_connection_error(ConnectionRefusedError("x")))
    assert never_reached(Outcome(OutcomeKind.BACKOFF, "grpc UNAVAILABLE: failed to connect"))
    assert not never_reached(lost("Socket closed"))
    assert not never_reached(Outcome(OutcomeKind.BACKOFF, "http 503"))
    assert not never_reached(ACK)


# -- sending -------------------------------------------------------------------------------------


async def test_deliveries_spread_over_the_instances_by_outstanding_work() -> None:
    # Given three instances, one twice as big
    registry = Registry([member(1), member(2), member(3, capacity=200)])
    instances = {m.id: Instance(latency_s=0.02) for m in registry.members}
    pool = pool_of(registry, dict(instances))
    # When 400 deliveries go out at once
    answers = await asyncio.gather(*(pool.send(delivery(n), 5.0) for n in range(400)))
    # Then all are ACKed, and each instance got work in proportion to its capacity
    assert set(answers) == {ACK}
    counts = {k: len(i.received) for k, i in instances.items()}
    assert sum(counts.values()) == 400
    assert counts["m1"] == counts["m2"] == 100 and counts["m3"] == 200


async def test_a_delivery_an_instance_never_got_goes_to_another_at_once() -> None:
    registry = Registry([member(1), member(2)])
    down, up = ScriptedTransport(), ScriptedTransport()
    down.set_down(True)
    pool = pool_of(registry, {"m1": down, "m2": up})
    assert [await pool.send(delivery(n), 1.0) for n in range(4)] == [ACK] * 4
    # The instance that refused is set aside: it is asked once, not four times
    assert len(down.started) == 1 and len(up.started) == 4
    assert pool.stats.moved == 1


async def test_a_killed_instance_gives_its_calls_to_the_others_once_each() -> None:
    # Given two instances and 20 deliveries out, 10 on each
    registry = Registry([member(1), member(2)])
    first, second = Instance(latency_s=0.2), Instance(latency_s=0.01)
    pool = pool_of(registry, {"m1": first, "m2": second})
    sends = [asyncio.create_task(pool.send(delivery(n), 5.0)) for n in range(20)]
    await asyncio.sleep(0.01)
    taken = set(first.received)
    assert len(taken) == 10
    # When the first is killed with them
    first.kill()
    answers = await asyncio.gather(*sends)
    # Then each went to the other instance once and was answered there: nothing to suspect
    assert answers == [ACK] * 20
    assert Counter(second.received) == Counter({d: 1 for d in {f"t/0/{n}" for n in range(20)}})
    assert pool.stats.moved == 10
    # And nothing new goes to the dead one
    await pool.send(delivery(99), 5.0)
    assert len(first.received) == 10


async def test_a_delivery_that_kills_a_second_instance_is_answered_as_lost() -> None:
    # A message that kills every instance it reaches: the second death is the dispatcher's
    # to judge (a suspect), so a pill cannot kill the whole pool unseen.
    registry = Registry([member(1), member(2), member(3)])
    instances = {m.id: Instance(latency_s=1.0) for m in registry.members}
    pool = pool_of(registry, dict(instances))
    pill = delivery(1)

    async def killer() -> None:
        while True:
            await asyncio.sleep(0.005)
            for instance in instances.values():
                if pill.id in instance.received and not instance.dead:
                    instance.kill()

    watcher = asyncio.create_task(killer())
    outcome = await pool.send(pill, 5.0)
    watcher.cancel()
    assert outcome.lost and outcome.kind is OutcomeKind.BACKOFF
    assert sum(i.dead for i in instances.values()) == 2
    # The next time it is sent and kills again, it is lost at once, not moved on
    third = next(i for i in instances.values() if not i.dead)
    sending = asyncio.create_task(pool.send(pill, 5.0))
    await asyncio.sleep(0.01)
    third.kill()
    assert (await sending).lost


async def test_an_instance_that_left_takes_nothing_new_and_its_breaks_are_not_suspected() -> None:
    registry = Registry([member(1), member(2)])
    leaving, staying = Instance(latency_s=0.3), Instance(latency_s=0.01)
    pool = pool_of(registry, {"m1": leaving, "m2": staying})
    pool.refresh()
    out = [asyncio.create_task(pool.send(delivery(n), 5.0)) for n in range(4)]
    await asyncio.sleep(0.01)
    assert len(leaving.received) == 2
    # When it leaves, then goes away with two calls out
    registry.set([member(2)])
    assert pool.refresh() == 0
    await pool.send(delivery(10), 5.0)
    leaving.kill()
    answers = await asyncio.gather(*out)
    # Then its calls were answered by the other one, without a suspicion, and it was closed
    assert answers == [ACK] * 4
    assert not any(a.lost for a in answers)
    assert delivery(10).id not in leaving.received
    await asyncio.sleep(0)
    assert leaving.closed


async def test_without_instances_a_send_backs_off_and_the_probe_says_down() -> None:
    registry = Registry([])
    pool = PoolTransport(registry, lambda _: ScriptedTransport(), name="orders")
    outcome = await pool.send(delivery(1), 1.0)
    assert outcome.kind is OutcomeKind.BACKOFF and not outcome.lost
    assert outcome.reason == "no consumer instance has joined route orders"
    assert not await pool.probe()
    registry.set([member(1)])
    assert await pool.probe()
    assert await pool.send(delivery(1), 1.0) == ACK


async def test_a_killed_instance_costs_no_attempt_no_suspect_and_no_open_breaker() -> None:
    # Given a route of three instances dispatching 300 messages, 100 in flight
    registry = Registry([member(1), member(2), member(3)])
    instances = {m.id: Instance(latency_s=0.02) for m in registry.members}
    pool = pool_of(registry, dict(instances))
    settings = DispatchSettings(max_in_flight=100, deadline_s=5.0)
    work = [Work(delivery(n)) for n in range(300)]

    async def kill_one() -> None:
        await asyncio.sleep(0.05)
        instances["m2"].kill()

    # When one instance is killed mid-traffic
    killing = asyncio.create_task(kill_one())
    report = await dispatch(pool, work, settings)
    await killing
    # Then every message is done in the main lane, no suspect, no backoff, breaker closed
    assert all(isinstance(s.step, Done) for s in report.settled)
    assert report.stats.suspected == 0
    assert OutcomeKind.BACKOFF not in report.stats.outcomes
    assert report.stats.breaker_transitions == ()
    assert len(instances["m2"].received) > 0 and pool.stats.moved > 0
    assert {i.dead for i in instances.values()} == {False, True}


async def test_a_send_with_no_instance_waits_for_one_to_join() -> None:
    registry = Registry([])
    instance = Instance()
    pool = PoolTransport(registry, lambda _: instance, name="r")
    sending = asyncio.create_task(pool.send(delivery(1), 4.0))
    await asyncio.sleep(0.2)
    assert not sending.done()
    # When an instance joins (the worker's feed refreshes the pool), the send goes at once
    registry.set([member(1)])
    pool.refresh()
    assert await asyncio.wait_for(sending, 1.0) == ACK
    assert instance.received == [delivery(1).id]


async def test_a_send_tries_an_instance_set_aside_again_when_its_time_is_up() -> None:
    registry = Registry([member(1)])
    restarting = ScriptedTransport()
    restarting.set_down(True)
    pool = pool_of(registry, {"m1": restarting})
    asyncio.get_running_loop().call_later(0.3, restarting.set_down, False)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await pool.send(delivery(1), 4.0) == ACK
    assert 0.9 <= loop.time() - began < 1.9  # set aside for DOWN_MIN_S, then tried again
    assert len(restarting.started) == 2
