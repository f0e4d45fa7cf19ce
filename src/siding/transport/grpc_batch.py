"""gRPC batch transport: deliveries gathered into ``DeliveryBatch`` frames on a long-lived
``DeliverBatches`` stream (docs/batch.md); each delivery keeps its own deadline and outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import cast

import grpc
import grpc.aio

from siding.errors import TransportError
from siding.model import Delivery, Outcome
from siding.transport.batching import BatchLimits, Gatherer, framed_size
from siding.transport.grpc_common import (
    ChannelSpec,
    Metadata,
    delivery_to_proto,
    stream_compression,
)
from siding.transport.grpc_stream import (
    RESEND,
    GrpcStreamTransport,
    StandIn,
    StreamCall,
    _Pending,
    _Stream,
    stream_ended,
)
from siding.transport.outcomes import (
    oversize,
    too_large,
)
from siding.v1 import consumer_pb2, consumer_pb2_grpc

log = logging.getLogger(__name__)

BatchCall = grpc.aio.StreamStreamCall[consumer_pb2.DeliveryBatch, consumer_pb2.ResultBatch]
_Item = tuple[_Pending, str, consumer_pb2.Delivery]


def batch_stream_ended(
    cause: str, entries: Sequence[tuple[bool, int, int]], *, ours: bool = False
) -> tuple[list[Outcome], int | None]:
    """Pure: the outcome of each delivery still waiting, given as (written, frame bytes, frame
    deliveries), when a ``DeliverBatches`` stream ends for ``cause``; and the consumer's message
    limit when it refused a frame for its size.

    - a refused frame ("larger than max (N vs. M)", N its size) of one delivery: that delivery
      is too large, to the DLQ; of several: each is sent again (``RESEND``) in frames of at most
      M bytes, without spending an attempt; every other delivery of the stream (in an earlier
      frame, or not yet written) is sent again too: the consumer is up, nothing to back off from;
    - otherwise as ``stream_ended`` (written deliveries are suspects, unless we closed it).
    """
    sizes = oversize(cause)
    if sizes is not None and any(w and size == sizes[0] for w, size, _ in entries):
        big, limit = sizes
        refused = too_large(f"{big} bytes, the consumer accepts at most {limit}: {cause}")
        outcomes = [
            refused if w and size == big and count == 1 else RESEND for w, size, count in entries
        ]
        return outcomes, limit
    return stream_ended(cause, [(w, size) for w, size, _ in entries], ours=ours), None


class Unimplemented(TransportError):
    """The consumer does not serve ``DeliverBatches``."""


def is_unimplemented(error: BaseException) -> bool:
    if isinstance(error, grpc.aio.AioRpcError):
        return error.code() is grpc.StatusCode.UNIMPLEMENTED
    return isinstance(error, Unimplemented)


async def serves_batches(
    channel: grpc.aio.Channel, metadata: Metadata, timeout_s: float
) -> bool | None:
    """Asks the consumer whether it serves ``DeliverBatches``, with a call that sends nothing
    and ends at once: UNIMPLEMENTED says no, any other status it sends says yes; None when it
    cannot be asked (down, too slow, cancelled)."""
    call = consumer_pb2_grpc.ConsumerStub(channel).DeliverBatches(
        None, metadata=metadata, timeout=timeout_s
    )
    try:
        await call.done_writing()
        code = await call.code()
    except Exception:  # whatever stops the question leaves it unanswered
        call.cancel()
        return None
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return False
    unanswered = {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    }
    return None if code in unanswered else True


class _BatchStream(_Stream):
    """One open ``DeliverBatches`` call: deliveries are gathered into frames (count, size,
    linger); results come back in frames of any size and are matched by delivery id."""

    def __init__(
        self,
        call: BatchCall,
        channel: grpc.aio.Channel,
        limits: BatchLimits,
        on_unimplemented: Callable[[], None],
        on_refused: Callable[[int], None],
        *,
        ask: Callable[[], Awaitable[bool | None]],
    ) -> None:
        self._batch_call = call
        # Asks the consumer whether it serves DeliverBatches, when a stand-in status hid it.
        self._ask = ask
        self._answer: asyncio.Future[bool | None] | None = None  # asked once per stream
        self._heard = False  # a result frame came back: the consumer serves DeliverBatches
        self._frames: asyncio.Queue[list[_Item]] = asyncio.Queue()
        self._gatherer: Gatherer[_Item] = Gatherer(limits, self._frames.put_nowait)
        self._on_unimplemented = on_unimplemented
        self._on_refused = on_refused
        # The base class only writes, iterates and cancels the call: the same for both RPCs.
        super().__init__(cast(StreamCall, call), channel)

    def submit(self, delivery: Delivery) -> _Pending:
        entry = self.pending.get(delivery.id)
        if entry is None:
            message = delivery_to_proto(delivery)
            entry = self.pending[delivery.id] = _Pending()
            self._gatherer.add((entry, delivery.id, message), framed_size(message.ByteSize()))
        return entry

    async def _write_loop(self) -> None:
        try:
            while True:
                frame = await self._frames.get()
                live = [item for item in frame if self.pending.get(item[1]) is item[0]]
                if not live:
                    continue  # their senders gave up before the frame reached the wire
                batch = consumer_pb2.DeliveryBatch(deliveries=[m for _, _, m in live])
                size = batch.ByteSize()
                # On the wire once handed to gRPC (``_Pending.written``), unless the call ended.
                sent = not self._batch_call.done()
                for entry, _, _ in live:
                    entry.written, entry.size, entry.frame_count = sent, size, len(live)
                await self._batch_call.write(batch)
        except Exception as error:  # whatever stops the stream must fail it, never hang it
            self.fail(await self._why(error))

    def _status_error(self, code: grpc.StatusCode, details: str) -> TransportError:
        error = super()._status_error(code, details)
        return Unimplemented(str(error)) if code is grpc.StatusCode.UNIMPLEMENTED else error

    async def _why(self, error: Exception) -> BaseException:
        """As for a stream; and when grpc.aio's stand-in hid what ended a call that never
        answered (the consumer may have refused DeliverBatches), the consumer is asked."""
        why = await super()._why(error)
        if isinstance(why, StandIn) and not self._heard and await self._serves() is False:
            return Unimplemented(f"{why} (the consumer does not serve DeliverBatches)")
        return why

    async def _serves(self) -> bool | None:
        # Both loops may meet the stand-in; the first to fail the stream cancels the other.
        if self._answer is None:
            self._answer = asyncio.ensure_future(self._ask())
        return await asyncio.shield(self._answer)

    async def _read_loop(self) -> None:
        try:
            async for frame in self._batch_call:
                self._heard = True
                for message in frame.results:
                    self._on_result(message)
        except Exception as error:
            self.fail(await self._why(error))
            return
        self.fail(TransportError("the consumer closed the stream"))

    def _outcomes_at_end(self, error: BaseException, cause: str) -> list[Outcome]:
        self._gatherer.take()
        if is_unimplemented(error):
            self._on_unimplemented()
            return [RESEND] * len(self.pending)
        entries = [(e.written, e.size, e.frame_count) for e in self.pending.values()]
        outcomes, limit = batch_stream_ended(cause, entries, ours=self._closing)
        if limit is not None:
            self._on_refused(limit)
        return outcomes


# The consumers (targets) that answered DeliverBatches with UNIMPLEMENTED, in this process: a
# worker asks each consumer once, whichever of its transports asks first (docs/batch.md).
_UNBATCHED: set[str] = set()


class GrpcBatchTransport(GrpcStreamTransport):
    """Sends deliveries in ``DeliveryBatch`` frames over ``DeliverBatches`` (docs/batch.md).

    Each ``send`` is one delivery with its own deadline, as for ``GrpcStreamTransport``; the
    concurrent sends of one event loop are gathered into frames of at most ``limits.max_items``
    deliveries and ``limits.max_bytes`` bytes, each leaving ``limits.linger_s`` after its first
    delivery at the latest. A broken stream fails its deliveries as ``stream_ended`` says, so a
    consumer that dies with a frame in its hands makes every delivery of it a suspect.

    A consumer that answers UNIMPLEMENTED (it serves only ``DeliverStream``) is logged once, and
    this transport sends one delivery per message on ``DeliverStream`` from then on; the
    deliveries that met the refusal go again there, within their deadlines, without spending an
    attempt.
    """

    def __init__(self, spec: ChannelSpec, *, limits: BatchLimits) -> None:
        super().__init__(spec)
        self.limits = limits
        self.batching = True

    def _open_stream(self, channel: grpc.aio.Channel) -> _Stream:
        # A worker's transports of one consumer (its lanes') share gRPC's connection: once one
        # of them heard UNIMPLEMENTED, the others do not ask again.
        if self.batching and self.target in _UNBATCHED:
            self.batching = False
        if not self.batching:
            return super()._open_stream(channel)
        stub = consumer_pb2_grpc.ConsumerStub(channel)
        compression = stream_compression(self._channel.spec.compression)
        call = stub.DeliverBatches(None, metadata=self._metadata, compression=compression)
        ask = partial(serves_batches, channel, self._metadata, self._channel.spec.probe_timeout_s)
        return _BatchStream(call, channel, self.limits, self._fall_back, self._refused, ask=ask)

    def _fall_back(self) -> None:
        if self.batching:
            self.batching = False
            if self.target in _UNBATCHED:
                return  # another transport of this worker said it already
            _UNBATCHED.add(self.target)
            log.warning(
                "the consumer at %s does not implement DeliverBatches (UNIMPLEMENTED): its"
                " deliveries go one per message on DeliverStream from now on",
                self.target,
            )

    def _refused(self, limit: int) -> None:
        if limit < self.limits.max_bytes:
            log.warning(
                "the consumer at %s refused a batch larger than %d bytes: batches stay under it",
                self.target,
                limit,
            )
            self.limits = BatchLimits(self.limits.max_items, self.limits.linger_s, max(1, limit))
