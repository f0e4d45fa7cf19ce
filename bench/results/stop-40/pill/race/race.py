"""How often does a consumer killed by the one delivery it was sent leave that delivery
*not* lost (written=False) on the gRPC batch stream? Real sim consumer process, real grpc."""
import asyncio, sys
from collections import Counter
from siding.devkit.sim_consumer import SimConsumerProcess, SimSettings
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.batching import BatchLimits
from siding.transport.grpc_common import ChannelSpec
from siding.model import Delivery


def d(i, v):
    return Delivery(f"t/0/{i}", "t", 0, i, key=None, value=v)


async def trial(t, proc, i, mode, stats):
    while not await t.probe():
        await asyncio.sleep(0.02)
    if mode == "warm":
        o = await t.send(d(10_000 + i, b"ok"), 5)
        assert o.kind.name == "ACK", o
    o = await t.send(d(i, b"PILL"), 5)
    stats[(o.lost, o.reason[:100])] += 1
    while proc.exit_code() is None:
        await asyncio.sleep(0.01)
    proc.stop()
    proc.start()


async def main(n: int, mode: str) -> None:
    proc = SimConsumerProcess(SimSettings(crash_on=("PILL",)))
    proc.start()
    t = GrpcBatchTransport(ChannelSpec(proc.target), limits=BatchLimits(64, 0.0, 4 << 20))
    stats: Counter = Counter()
    try:
        for i in range(n):
            await asyncio.wait_for(trial(t, proc, i, mode, stats), 30)
    finally:
        await t.close()
        proc.stop()
        for k, v in stats.most_common():
            print(mode, v, k, flush=True)


asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
