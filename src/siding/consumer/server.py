"""The gRPC consumer server; the code lives in the thin SDK (``siding_consumer.server``)."""

from siding_consumer.server import (
    DEFAULT_SERVER_OPTIONS,
    ConsumerServer,
    ServerOption,
    serve,
    until_signalled,
)

__all__ = ["DEFAULT_SERVER_OPTIONS", "ConsumerServer", "ServerOption", "serve", "until_signalled"]
