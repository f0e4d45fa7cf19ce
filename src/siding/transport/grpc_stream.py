"""gRPC stream transport: many deliveries in flight on one long-lived ``DeliverStream``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
import grpc.aio

from siding.errors import TransportError
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport.batching import Expiry
from siding.transport.grpc_common import (
    ChannelSpec,
    LoopChannel,
    call_metadata,
    delivery_to_proto,
    probe_channel,
    result_from_proto,
    stream_compression,
)
from siding.transport.outcomes import (
    lost,
    never_connected,
    outcome_from_connection_error,
    outcome_from_grpc,
    outcome_from_timeout,
    oversize,
    too_large,
)
from siding.transport.stream_trace import trace_ended
from siding.v1 import consumer_pb2, consumer_pb2_grpc

log = logging.getLogger(__name__)

# An abandoned copy whose answer never came stops keeping its id off a stream after this long.
ABANDONED_TTL_S = 600.0
StreamCall = grpc.aio.StreamStreamCall[consumer_pb2.Delivery, consumer_pb2.Result]
# Never reaches the dispatcher: the transport sends the delivery again itself, within its
# deadline, on a new stream (after a size refusal that was not its own; on DeliverStream after
# UNIMPLEMENTED; in smaller frames after a frame was refused for its size).
RESEND = Outcome(OutcomeKind.BACKOFF, "sent again")
# A write that meets a call the consumer has just ended fails in gRPC's core, and grpc.aio then
# sets the call's status to INTERNAL with these details, over the status the consumer sent (a
# race seen in 14 runs of 1,300 for a DeliverBatches call refused as UNIMPLEMENTED): the
# consumer's own word is lost, and a stream ended so says nothing about what it said.
CORE_WRITE_ERROR = "Internal error from Core"


class StandIn(TransportError):
    """The call ended with grpc.aio's stand-in status (``CORE_WRITE_ERROR``)."""


@dataclass(eq=False, slots=True)
class _Pending:
    """One delivery id on the wire; every ``send`` waiting for its answer has a future here."""

    waiters: list[asyncio.Future[Outcome]] = field(default_factory=list)
    # Handed to gRPC's write on a live call: from then on the consumer may have it, even before
    # gRPC says the write is over (a consumer that reads a delivery and dies at once can break
    # the stream first: that delivery must be a suspect, or its death is not counted).
    written: bool = False
    # The serialized frame it went in (a Delivery, or a DeliveryBatch of ``frame_count``), to
    # match a "larger than max (N vs. M)" refusal.
    size: int = 0
    frame_count: int = 1

    def resolve(self, outcome: Outcome) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(outcome)


class _Stream:
    """One open ``DeliverStream`` call: a writer task drains the outbox onto the wire, a reader
    task matches results to pending deliveries by id. Once broken it stays broken."""

    def __init__(self, call: StreamCall, channel: grpc.aio.Channel) -> None:
        self.call = call
        self.channel = channel
        self.pending: dict[str, _Pending] = {}
        # Ids of copies written and then given up on (deadline), with when: their late answers
        # would be taken for a later copy of the id, so later copies go on another stream.
        self.abandoned: dict[str, float] = {}
        self.broken = False
        self._closing = False
        self._outbox: asyncio.Queue[tuple[_Pending, str, consumer_pb2.Delivery]] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write_loop(), name="siding-grpc-stream-writer")
        self._reader = asyncio.create_task(self._read_loop(), name="siding-grpc-stream-reader")

    def submit(self, delivery: Delivery) -> _Pending:
        entry = self.pending.get(delivery.id)
        if entry is None:
            message = delivery_to_proto(delivery)
            entry = self.pending[delivery.id] = _Pending(size=message.ByteSize())
            self._outbox.put_nowait((entry, delivery.id, message))
        return entry

    def forget(self, delivery_id: str, entry: _Pending) -> None:
        """Every sender of ``entry`` gave up: a late answer for it is dropped."""
        if not entry.waiters and self.pending.get(delivery_id) is entry:
            del self.pending[delivery_id]
            if entry.written:
                self.abandoned[delivery_id] = time.monotonic()

    def takes(self, delivery_id: str, now: float) -> bool:
        """Whether a copy of ``delivery_id`` can be sent here without an earlier copy's late
        answer being mistaken for its own."""
        since = self.abandoned.get(delivery_id)
        if since is not None and now - since > ABANDONED_TTL_S:
            del self.abandoned[delivery_id]
            since = None
        return since is None

    @property
    def idle(self) -> bool:
        return not self.pending and not self.abandoned

    async def _write_loop(self) -> None:
        try:
            while True:
                entry, delivery_id, message = await self._outbox.get()
                if self.pending.get(delivery_id) is not entry:
                    continue  # its senders gave up before it reached the wire
                entry.written = not self.call.done()  # an ended call sends nothing
                await self.call.write(message)
        except Exception as error:  # whatever stops the stream must fail it, never hang it
            self.fail(await self._why(error))

    async def _read_loop(self) -> None:
        try:
            async for message in self.call:
                self._on_result(message)
        except Exception as error:
            self.fail(await self._why(error))
            return
        self.fail(TransportError("the consumer closed the stream"))

    async def _why(self, error: Exception) -> BaseException:
        """What ended the call: a write or a read fails once the call has ended, and the call's
        status says why (the consumer's UNIMPLEMENTED, its "larger than max" refusal, its going
        away), whichever loop notices first; ``StandIn`` when grpc.aio's stand-in hid it."""
        if not self.call.done():
            return error
        try:
            code, details = await self.call.code(), await self.call.details()
        except Exception:  # grpc could not say: the error at hand is all there is
            return error
        return self._status_error(code, details)

    def _status_error(self, code: grpc.StatusCode, details: str) -> TransportError:
        text = f"stream broke: grpc {code.name}" + (f": {details}" if details else "")
        stand_in = code is grpc.StatusCode.INTERNAL and details == CORE_WRITE_ERROR
        return StandIn(text) if stand_in else TransportError(text)

    def _on_result(self, message: consumer_pb2.Result) -> None:
        entry = self.pending.pop(message.delivery_id, None)
        if entry is None:
            # The late answer of a copy given up on: that id is clear here again.
            self.abandoned.pop(message.delivery_id, None)
            return
        result = result_from_proto(message)
        entry.resolve(outcome_from_grpc(grpc.StatusCode.OK, result=result))

    def fail(self, error: BaseException) -> None:
        """The stream is over: every delivery still waiting gets its outcome (``stream_ended``)."""
        if self.broken:
            return
        self.broken = True
        cause = _describe(error)
        log.info("gRPC stream to the consumer ended: %s", cause)
        outcomes = self._outcomes_at_end(error, str(cause))
        trace_ended(
            str(cause), [(i, e.written) for i, e in self.pending.items()], ours=self._closing
        )
        for entry, outcome in zip(self.pending.values(), outcomes, strict=True):
            entry.resolve(outcome)
        self.pending.clear()
        self.call.cancel()
        current = asyncio.current_task()
        for task in (self._writer, self._reader):
            if task is not current:
                task.cancel()

    def _outcomes_at_end(self, error: BaseException, cause: str) -> list[Outcome]:  # noqa: ARG002
        """The outcome of each pending delivery, in order, once the stream ended with ``error``."""
        entries = [(e.written, e.size) for e in self.pending.values()]
        return stream_ended(cause, entries, ours=self._closing)

    def close(self, why: str) -> None:
        """We end the stream (not the consumer): nothing waiting on it is suspected."""
        self._closing = True
        self.fail(TransportError(why))

    async def aclose(self) -> None:
        self.close("transport closed")
        for task in (self._writer, self._reader):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def stream_ended(
    cause: str, entries: Sequence[tuple[bool, int]], *, ours: bool = False
) -> list[Outcome]:
    """Pure: the outcome of each delivery still waiting, given as (written, size), when a stream
    ends for ``cause``.

    - the consumer's gRPC refused one message for its size ("larger than max (N vs. M)") and
      the delivery of that size is known: it is dead-lettered, every other one is sent again
      (``RESEND``) on a new stream: the consumer is up, so none of them may feed the breaker;
    - otherwise deliveries already written were in the consumer's hands when it went away:
      suspects (``lost``), unless we closed the stream ourselves (``ours``); the others never
      left and are sent again.
    """
    sizes = oversize(cause)
    if sizes is not None and any(written and size == sizes[0] for written, size in entries):
        big, limit = sizes
        refused = too_large(f"{big} bytes, the consumer accepts at most {limit}: {cause}")
        return [refused if w and size == big else RESEND for w, size in entries]
    unreached = outcome_from_connection_error(TransportError(cause))
    suspect = not ours and not never_connected(cause)
    return [lost(cause) if written and suspect else unreached for written, _ in entries]


def _describe(error: BaseException) -> BaseException:
    if isinstance(error, grpc.aio.AioRpcError):
        details = error.details()
        text = f"stream broke: grpc {error.code().name}" + (f": {details}" if details else "")
        return TransportError(text)
    return error


class GrpcStreamTransport:
    """Sends deliveries over ONE long-lived ``DeliverStream`` per transport (per event loop).

    State machine: NO STREAM --send--> OPEN --breaks--> BROKEN --next send--> OPEN (a new call).
    While OPEN, any number of deliveries are in flight; results are matched by delivery id and
    may arrive in any order. Each ``send`` enforces its own deadline client-side (RETRY outcome).
    When the stream breaks (consumer down, restarted, closed the stream), every delivery still
    waiting gets a BACKOFF outcome; the next ``send`` opens a new stream. When the consumer
    broke it because one delivery was too large for it, that one is DEAD and the others go
    again on a new stream within their deadlines (a poison pill is not an outage).

    Duplicate ids: a ``send`` whose delivery id is already in flight on the stream is not written
    again; it waits (with its own deadline) for the answer to the one on the wire, since results
    carry only the id and could not tell two copies apart. For the same reason a copy sent after
    an earlier one was given up on (its deadline passed, no answer yet) goes on a second stream
    of the same channel: it is settled by its own answer, never by the late answer of the
    earlier attempt. Extra streams close once nothing is pending or abandoned on them.

    Constructing it does no I/O and needs no event loop. A Spark worker that runs each batch in a
    new loop should ``close()`` it before that loop ends; the next ``send`` then starts afresh.
    """

    def __init__(self, spec: ChannelSpec) -> None:
        self._channel = LoopChannel(spec)
        self._metadata = call_metadata(spec.token)
        self._streams: list[_Stream] = []  # the first is the main one

    @property
    def target(self) -> str:
        return self._channel.spec.target

    @property
    def in_flight(self) -> int:
        """Distinct delivery ids waiting for an answer on the open streams."""
        return sum(len(s.pending) for s in self._streams if not s.broken)

    def _stream_for(self, delivery_id: str) -> _Stream:
        channel = self._channel.get()
        self._streams = [s for s in self._streams if not s.broken and s.channel is channel]
        now = time.monotonic()
        chosen = None
        for stream in self._streams:
            if delivery_id in stream.pending or stream.takes(delivery_id, now):
                chosen = stream
                break
        if chosen is None:
            chosen = self._open_stream(channel)
            self._streams.append(chosen)
        for extra in self._streams[1:]:
            if extra is not chosen and extra.idle:
                self._streams.remove(extra)
                extra.close("extra stream no longer needed")
        return chosen

    def _open_stream(self, channel: grpc.aio.Channel) -> _Stream:
        stub = consumer_pb2_grpc.ConsumerStub(channel)
        compression = stream_compression(self._channel.spec.compression)
        call = stub.DeliverStream(None, metadata=self._metadata, compression=compression)
        return _Stream(call, channel)

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        loop = asyncio.get_running_loop()
        wait = Expiry(deadline_s)
        # One timer handle instead of asyncio.timeout: a fifth of the CPU a delivery costs here.
        timer = loop.call_later(deadline_s, wait.expire)
        try:
            while not wait.expired:
                stream = self._stream_for(delivery.id)
                entry = stream.submit(delivery)
                waiter: asyncio.Future[Outcome] = loop.create_future()
                wait.waiter = waiter
                entry.waiters.append(waiter)
                try:
                    outcome = await waiter
                finally:
                    entry.waiters.remove(waiter)
                    stream.forget(delivery.id, entry)
                if outcome is not RESEND:
                    return outcome
            return outcome_from_timeout(deadline_s)
        finally:
            timer.cancel()

    async def probe(self) -> bool:
        return await probe_channel(
            self._channel.get(), self._metadata, self._channel.spec.probe_timeout_s
        )

    async def close(self) -> None:
        streams, self._streams = self._streams, []
        for stream in streams:
            if self._channel.is_current(stream.channel):
                await stream.aclose()
        await self._channel.close()
