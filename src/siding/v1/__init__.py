"""The delivery contract's generated code (proto/siding/v1), which lives in the thin SDK
(``siding_consumer.v1``): protobuf allows one copy of the ``siding.v1`` descriptors per process,
so the proxy and the SDK share it. ``siding.v1.consumer_pb2`` keeps working as before."""

import sys

from siding_consumer.v1 import consumer_pb2 as consumer_pb2
from siding_consumer.v1 import consumer_pb2_grpc as consumer_pb2_grpc

# `import siding.v1.consumer_pb2` (and `from siding.v1.consumer_pb2 import X`) find the same module.
sys.modules[f"{__name__}.consumer_pb2"] = consumer_pb2
sys.modules[f"{__name__}.consumer_pb2_grpc"] = consumer_pb2_grpc

__all__ = ["consumer_pb2", "consumer_pb2_grpc"]
