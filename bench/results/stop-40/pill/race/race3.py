"""The pill in the middle of a burst (the backlog after a restart): is its outcome lost?"""
import asyncio, sys, itertools
from collections import Counter
from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings, Behaviour
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.batching import BatchLimits
from siding.transport.grpc_common import ChannelSpec
from siding.model import Delivery

seq = itertools.count()


def d(v):
    i = next(seq)
    return Delivery(f"t/0/{i}", "t", 0, i, key=None, value=v)


async def main(n: int, before: int, after: int, size: int) -> None:
    proc = SimConsumerProcess(SimSettings(behaviour=Behaviour(latency_s=(0.005, 0.015)), crash_on=("PILL",)))
    proc.start()
    t = GrpcBatchTransport(ChannelSpec(proc.target), limits=BatchLimits(64, 0.0, 4 << 20))
    stats: Counter = Counter()
    try:
        for _ in range(n):
            while not await t.probe():
                await asyncio.sleep(0.02)
            body = b"x" * size
            sends = [asyncio.create_task(t.send(d(body), 10)) for _ in range(before)]
            pill = asyncio.create_task(t.send(d(b"PILL" + body), 10))
            sends += [asyncio.create_task(t.send(d(body), 10)) for _ in range(after)]
            o = await pill
            stats[(o.lost, o.reason[:100])] += 1
            await asyncio.gather(*sends, return_exceptions=True)
            kinds = Counter((s.result().kind.name, s.result().lost) for s in sends)
            print("pill lost", o.lost, dict(kinds), flush=True)
            while proc.exit_code() is None:
                await asyncio.sleep(0.01)
            proc.stop()
            proc.start()
    finally:
        await t.close()
        proc.stop()
        for k, v in stats.most_common():
            print(before, after, size, v, k, flush=True)


asyncio.run(main(*map(int, sys.argv[1:])))
