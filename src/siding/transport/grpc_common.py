"""What both gRPC transports (and the consumer SDK) share: the contract's messages <-> siding's
model, channels bound to an event loop, call metadata and the health probe."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from siding.errors import ConfigError
from siding.model import Delivery, Result, Verdict
from siding.transport.compression import OFF, Compression, compresses
from siding.transport.tls import ClientTls
from siding.v1 import consumer_pb2

# One conversion for the SDK and the proxy: the SDK's.
from siding_consumer.wire import delivery_from_proto as delivery_from_proto  # noqa: PLC0414
from siding_consumer.wire import output_from_proto

ChannelOption = tuple[str, int | str]
Metadata = tuple[tuple[str, str], ...]

CONSUMER_SERVICE = "siding.v1.Consumer"

DEFAULT_CHANNEL_OPTIONS: tuple[ChannelOption, ...] = (
    # A recovered consumer should be noticed at once, not after gRPC's default two minutes (a
    # restarted pod, a consumer that a poison pill killed): reconnecting is cheap. With a 1 s
    # ceiling the breakers closed 0.5-1.1 s after the consumer served again, and everything
    # waiting behind them waited that much more at each of a crash pill's deaths (stop 38).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 250),
    # Find dead connections under a quiet long-lived stream; servers that find this too
    # frequent answer GOAWAY(too_many_pings) and gRPC doubles the interval by itself.
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    # dns:/// targets with several addresses: spread calls over all of them.
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)

_VERDICT_FROM_PROTO: dict[consumer_pb2.Verdict.ValueType, Verdict] = {
    consumer_pb2.VERDICT_ACK: Verdict.ACK,
    consumer_pb2.VERDICT_RETRY: Verdict.RETRY,
    consumer_pb2.VERDICT_DEAD: Verdict.DEAD,
}
_VERDICT_TO_PROTO: dict[Verdict, consumer_pb2.Verdict.ValueType] = {
    verdict: number for number, verdict in _VERDICT_FROM_PROTO.items()
}


def delivery_to_proto(delivery: Delivery) -> consumer_pb2.Delivery:
    message = consumer_pb2.Delivery(
        id=delivery.id,
        topic=delivery.topic,
        partition=delivery.partition,
        offset=delivery.offset,
        headers=[consumer_pb2.Header(key=k, value=v) for k, v in delivery.headers],
        timestamp_ms=delivery.timestamp_ms,
        attempt=delivery.attempt,
        lane=delivery.lane,
    )
    # Optional fields: leaving them unset is how null (no key, tombstone) travels.
    if delivery.key is not None:
        message.key = delivery.key
    if delivery.value is not None:
        message.value = delivery.value
    return message


def result_to_proto(result: Result) -> consumer_pb2.Result:
    message = consumer_pb2.Result(
        delivery_id=result.delivery_id,
        verdict=_VERDICT_TO_PROTO[result.verdict],
        reason=result.reason,
    )
    if result.retry_after_s is not None:
        message.retry_after_seconds = result.retry_after_s
    return message


def result_from_proto(message: consumer_pb2.Result) -> Result:
    """A ``Result`` message as the model's ``Result``, with its outputs (docs/outputs.md).

    A missing or unknown verdict is a consumer bug: it becomes RETRY, so the message is neither
    lost (ACK) nor dead-lettered for something that is not its fault.
    """
    verdict = _VERDICT_FROM_PROTO.get(message.verdict)
    reason = message.reason
    if verdict is None:
        verdict = Verdict.RETRY
        reason = reason or f"consumer answered without a verdict ({int(message.verdict)})"
    retry_after = message.retry_after_seconds if message.HasField("retry_after_seconds") else None
    outputs = tuple(output_from_proto(o) for o in message.outputs)
    return Result(message.delivery_id, verdict, retry_after, reason, outputs)


def call_compression(choice: Compression, size: int) -> grpc.Compression | None:
    """Pure: how a unary call of a ``size``-byte message is compressed (``None``: not)."""
    return grpc.Compression.Gzip if compresses(choice, size) else None


def stream_compression(choice: Compression) -> grpc.Compression | None:
    """Pure: how a stream's messages are compressed. gRPC compresses a call as a whole, so
    ``compress_above`` cannot pick messages within a stream: each of them goes compressed."""
    return grpc.Compression.Gzip if choice.on else None


def call_metadata(token: str | None) -> Metadata:
    return (("authorization", f"Bearer {token}"),) if token else ()


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """How to reach and call one endpoint, for any of the gRPC transports. ``target`` is
    ``host:port`` or ``dns:///host:port``; ``token``, when set, goes with every call."""

    target: str
    tls: bool = False
    ca_file: str | None = None
    options: tuple[ChannelOption, ...] = ()
    client_tls: ClientTls | None = None
    token: str | None = field(default=None, repr=False)
    probe_timeout_s: float = 2.0
    compression: Compression = OFF

    def __post_init__(self) -> None:
        if not self.target:
            raise ConfigError("target", "a gRPC target (host:port or dns:///host:port) is required")
        if self.ca_file is not None and not self.tls:
            raise ConfigError("ca_file", "a CA file only makes sense with tls enabled")

    def open(self) -> grpc.aio.Channel:
        """A new channel on the running event loop (no I/O until the first call)."""
        options = merge_options(DEFAULT_CHANNEL_OPTIONS, self.options)
        if not self.tls:
            return grpc.aio.insecure_channel(self.target, options=options)
        material = self.client_tls or ClientTls()
        root = material.ca_pem
        if self.ca_file is not None:
            try:
                root = Path(self.ca_file).read_bytes()
            except OSError as exc:
                raise ConfigError("ca_file", f"cannot read {self.ca_file}: {exc}") from exc
        credentials = grpc.ssl_channel_credentials(
            root_certificates=root,
            private_key=material.key_pem,
            certificate_chain=material.cert_pem,
        )
        return grpc.aio.secure_channel(self.target, credentials, options=options)


def merge_options(
    defaults: Sequence[ChannelOption], overrides: Sequence[ChannelOption]
) -> list[ChannelOption]:
    """Channel options with ``overrides`` replacing defaults of the same name."""
    merged = dict(defaults)
    merged.update(overrides)
    return list(merged.items())


class LoopChannel:
    """A channel for whichever event loop is running.

    A ``grpc.aio`` channel belongs to the loop that created it, and a Spark worker may run each
    batch in a new loop; so the channel is made lazily and made again when the loop changes.
    """

    def __init__(self, spec: ChannelSpec) -> None:
        self.spec = spec
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> grpc.aio.Channel:
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop:
            # The old loop is gone (closed with it); its channel cannot be awaited any more.
            self._channel = self.spec.open()
            self._loop = loop
        return self._channel

    def is_current(self, channel: grpc.aio.Channel) -> bool:
        return channel is self._channel and self._loop is asyncio.get_running_loop()

    async def close(self) -> None:
        channel, loop = self._channel, self._loop
        self._channel = self._loop = None
        if channel is not None and loop is asyncio.get_running_loop():
            await channel.close(None)


async def probe_channel(channel: grpc.aio.Channel, metadata: Metadata, timeout_s: float) -> bool:
    """gRPC health checking (overall server status); when the server does not implement it,
    whether the channel can connect at all."""
    stub: Any = health_pb2_grpc.HealthStub(channel)
    try:
        # wait_for_ready: a consumer that comes back while the probe waits is seen at once,
        # instead of the breaker staying open for its next, doubled, period.
        response = await stub.Check(
            health_pb2.HealthCheckRequest(service=""),
            timeout=timeout_s,
            metadata=metadata,
            wait_for_ready=True,
        )
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.UNIMPLEMENTED:
            return await channel_ready(channel, timeout_s)
        return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


async def channel_ready(channel: grpc.aio.Channel, timeout_s: float) -> bool:
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout_s)
    except TimeoutError:
        return False
    return True
