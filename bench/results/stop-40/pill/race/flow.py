"""A consumer that goes away while a large delivery is still being written (flow control):
is the delivery lost (a suspect) or 'never reached'? In-process grpc server, real loopback."""
import asyncio, sys
from collections.abc import AsyncIterator
import grpc, grpc.aio
from siding.model import Delivery
from siding.transport.batching import BatchLimits
from siding.transport.grpc_batch import GrpcBatchTransport
from siding.transport.grpc_common import ChannelSpec
from siding.v1 import consumer_pb2, consumer_pb2_grpc

class Dies(consumer_pb2_grpc.ConsumerServicer):
    def __init__(self): self.started = asyncio.Event()
    async def DeliverBatches(self, request_iterator, context):
        self.started.set()
        await asyncio.sleep(3600)
        yield consumer_pb2.ResultBatch()

async def one(size: int) -> None:
    servicer = Dies()
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    consumer_pb2_grpc.add_ConsumerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    t = GrpcBatchTransport(ChannelSpec(f"127.0.0.1:{port}", options=(("grpc.max_send_message_length", 64 << 20),)), limits=BatchLimits(64, 0.0, 64 << 20))
    send = asyncio.create_task(t.send(Delivery("t/0/1", "t", 0, 1, key=None, value=b"x" * size), 10))
    await servicer.started.wait()
    await asyncio.sleep(0.2)
    await server.stop(0)
    o = await send
    print(size, o.lost, o.reason[:120])
    await t.close()

for size in map(int, sys.argv[1:]):
    asyncio.run(one(size))
