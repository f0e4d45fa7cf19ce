"""Pure: the output records an answer carries (consume-and-produce, docs/outputs.md).

Only an ACK produces outputs. An answer whose outputs cannot be read, or that writes to a topic
the route does not list in ``outputs``, is a RETRY with a reason: never acked with an output
dropped.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from siding.model import ACK, Outcome, OutcomeKind
from siding_consumer.outputs import OutputError, outputs_from_json

JSON_CONTENT_TYPE = "application/json"
# An answer with outputs is read whole up to this size (gRPC's receive limit on siding's side).
MAX_OUTPUTS_BYTES = 64 * 1024 * 1024


def screen_outputs(outcome: Outcome, allowed: Collection[str]) -> Outcome:
    """``outcome`` when its outputs all go to ``allowed`` topics, else a RETRY naming the
    topics that are not; a verdict other than ACK produces nothing, so its outputs go."""
    if not outcome.outputs:
        return outcome
    if outcome.kind is not OutcomeKind.ACK:
        return replace(outcome, outputs=())
    count = len(outcome.outputs)
    if not allowed:
        return Outcome(
            OutcomeKind.RETRY,
            f"the answer carries {count} output record(s) and this route allows none"
            " (list the topics in the route's outputs): not acked, nothing of it produced",
        )
    refused = sorted({o.topic for o in outcome.outputs} - set(allowed))
    if not refused:
        return outcome
    return Outcome(
        OutcomeKind.RETRY,
        f"the answer writes to {', '.join(repr(t) for t in refused)}, not among the route's"
        f" outputs {sorted(allowed)}: not acked, nothing of it produced",
    )


def is_json(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == JSON_CONTENT_TYPE


def ack_from_body(content_type: str | None, body: bytes, complete: bool = True) -> Outcome:
    """The outcome of a 2xx answer to one webhook: ACK, with the outputs of a JSON body
    ``{"outputs": [...]}``. Any other body acks as it always did; a JSON object that cannot be
    read is a RETRY, since it may carry outputs."""
    text = body.strip()
    if not is_json(content_type) or not text.startswith(b"{"):
        return ACK
    if not complete:
        return Outcome(OutcomeKind.RETRY, "the answer with outputs could not be read whole")
    try:
        parsed = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return Outcome(OutcomeKind.RETRY, "the answer is not valid JSON (it may carry outputs)")
    if not isinstance(parsed, dict) or "outputs" not in parsed:
        return ACK
    return with_outputs(ACK, parsed, "outputs")


def with_outputs(outcome: Outcome, answer: Mapping[str, Any], where: str) -> Outcome:
    """``outcome`` with the outputs listed in ``answer["outputs"]`` (none when absent); a RETRY
    naming the bad field when they cannot be read. Only an ACK produces outputs."""
    if outcome.kind is not OutcomeKind.ACK or answer.get("outputs") is None:
        return outcome
    try:
        outputs = outputs_from_json(answer["outputs"], where)
    except OutputError as error:
        return Outcome(OutcomeKind.RETRY, f"the answer's outputs cannot be read: {error}")
    return replace(outcome, outputs=outputs) if outputs else outcome
