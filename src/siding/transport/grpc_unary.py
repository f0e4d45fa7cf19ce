"""gRPC unary transport: one ``Deliver`` call per delivery, the attempt's deadline as the call's."""

from __future__ import annotations

import time

import grpc
import grpc.aio

from siding.model import Delivery, Outcome
from siding.transport.grpc_common import (
    ChannelSpec,
    LoopChannel,
    call_compression,
    call_metadata,
    delivery_to_proto,
    probe_channel,
    result_from_proto,
)
from siding.transport.outcomes import outcome_from_grpc, outcome_from_timeout
from siding.transport.trace_context import with_trace
from siding.v1 import consumer_pb2_grpc

_CLOCK_SLACK_S = 0.001


class GrpcUnaryTransport:
    """Sends each delivery as its own ``Deliver`` call on one shared channel.

    Constructing it does no I/O and needs no event loop; the channel is opened on first use in
    the running loop (and again if a later call runs in another loop).
    """

    def __init__(self, spec: ChannelSpec) -> None:
        self._channel = LoopChannel(spec)
        self._metadata = call_metadata(spec.token)
        self._stub: consumer_pb2_grpc.ConsumerAsyncStub | None = None
        self._stub_channel: grpc.aio.Channel | None = None

    @property
    def target(self) -> str:
        return self._channel.spec.target

    def _current_stub(self) -> consumer_pb2_grpc.ConsumerAsyncStub:
        channel = self._channel.get()
        if self._stub is None or self._stub_channel is not channel:
            self._stub = consumer_pb2_grpc.ConsumerStub(channel)
            self._stub_channel = channel
        return self._stub

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        stub = self._current_stub()
        message = delivery_to_proto(delivery)
        choice = self._channel.spec.compression
        compression = call_compression(choice, message.ByteSize()) if choice.on else None
        started = time.monotonic()
        try:
            reply = await stub.Deliver(
                message,
                timeout=deadline_s,
                metadata=with_trace(self._metadata),
                compression=compression,
            )
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code is grpc.StatusCode.DEADLINE_EXCEEDED and (
                time.monotonic() - started >= deadline_s - _CLOCK_SLACK_S
            ):
                # Our own deadline ran out (not a status the consumer chose to send).
                return outcome_from_timeout(deadline_s)
            return outcome_from_grpc(code, error.details() or "")
        return outcome_from_grpc(grpc.StatusCode.OK, result=result_from_proto(reply))

    async def probe(self) -> bool:
        return await probe_channel(
            self._channel.get(), self._metadata, self._channel.spec.probe_timeout_s
        )

    async def close(self) -> None:
        self._stub = None
        await self._channel.close()
