"""The pill sent in the middle of a busy stream (innocents at ~rate msg/s, 5-15 ms each):
is its outcome lost? Real sim consumer process, real grpc, one transport as in a worker."""
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


async def load(t, rate, out):
    while True:
        out.append(asyncio.create_task(t.send(d(b"ok"), 5)))
        await asyncio.sleep(1 / rate)


async def main(n: int, rate: float) -> None:
    proc = SimConsumerProcess(SimSettings(behaviour=Behaviour(latency_s=(0.005, 0.015)), crash_on=("PILL",)))
    proc.start()
    t = GrpcBatchTransport(ChannelSpec(proc.target), limits=BatchLimits(64, 0.0, 4 << 20))
    stats: Counter = Counter()
    try:
        for _ in range(n):
            while not await t.probe():
                await asyncio.sleep(0.02)
            sends = []
            bg = asyncio.create_task(load(t, rate, sends))
            await asyncio.sleep(0.3)
            o = await t.send(d(b"PILL"), 5)
            bg.cancel()
            stats[(o.lost, o.reason[:100])] += 1
            others = [s.result() for s in sends if s.done()]
            while proc.exit_code() is None:
                await asyncio.sleep(0.01)
            proc.stop()
            await asyncio.gather(*sends, return_exceptions=True)
            lost = sum(1 for s in sends if s.result().lost)
            print("pill lost", o.lost, "others lost", lost, "of", len(sends), flush=True)
            proc.start()
    finally:
        await t.close()
        proc.stop()
        for k, v in stats.most_common():
            print(rate, v, k, flush=True)


asyncio.run(main(int(sys.argv[1]), float(sys.argv[2])))
