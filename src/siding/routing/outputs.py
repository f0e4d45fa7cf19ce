"""Pure: the records siding produces for a consumer's outputs (docs/outputs.md).

Each output keeps the consumer's key, value and headers, in order; siding appends its own
headers after them: a deterministic id (the input's delivery id and the output's index) for
downstream deduplication, and where the input came from. The same input answered again after a
crash gives the same ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from siding.model import Delivery, Output
from siding.routing.producer import OutRecord

OUTPUT_ID = "siding.output-id"
INPUT_TOPIC = "siding.input-topic"
INPUT_PARTITION = "siding.input-partition"
INPUT_OFFSET = "siding.input-offset"
OUTPUT_ROUTE = "siding.output-route"


def output_id(delivery_id: str, index: int) -> str:
    """``<input delivery id>/<index>``: the same for every answer to the same input."""
    return f"{delivery_id}/{index}"


def output_records(delivery: Delivery, outputs: Sequence[Output], route: str) -> list[OutRecord]:
    """The records to produce for ``outputs``, the answer to ``delivery`` on ``route``."""
    return [
        OutRecord(
            output.topic,
            output.key,
            output.value,
            (
                *output.headers,
                (OUTPUT_ID, output_id(delivery.id, index).encode()),
                (INPUT_TOPIC, delivery.topic.encode()),
                (INPUT_PARTITION, str(delivery.partition).encode()),
                (INPUT_OFFSET, str(delivery.offset).encode()),
                (OUTPUT_ROUTE, route.encode()),
            ),
        )
        for index, output in enumerate(outputs)
    ]
