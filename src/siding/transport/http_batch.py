"""HTTP batch transport: one signed POST per batch of deliveries, in the CloudEvents batched
mode of docs/batch.md, and an outcome per delivery from the answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from siding.errors import TransportError
from siding.model import Delivery, Outcome, OutcomeKind
from siding.transport import signing
from siding.transport.batch_envelope import (
    BATCH_CONTENT_TYPE,
    NO_RESULT,
    SPLIT,
    UNBATCHED,
    UNSAID,
    batch_id,
    batch_outcomes,
    envelope,
    event_size,
    reads_batches,
)
from siding.transport.batching import BatchLimits, Expiry, Gatherer
from siding.transport.compression import http_body, refused_encoding
from siding.transport.http import (
    HttpTransport,
    WebhookSpec,
    excerpt,
    outcome_from_request_error,
    read_body,
)
from siding.transport.outcomes import outcome_from_connection_error, outcome_from_timeout
from siding.transport.outputs import MAX_OUTPUTS_BYTES
from siding.transport.result_stream import (
    BATCH_ACCEPT,
    LineTooLong,
    ResultLines,
    is_result_stream,
    line_result,
)

log = logging.getLogger(__name__)

# A per-delivery answer for 1,000 deliveries, with their outputs (docs/outputs.md), fits; a
# longer one is not read.
DEFAULT_MAX_ANSWER_BYTES = MAX_OUTPUTS_BYTES
# No answer is due before the last deadline of a batch; a POST never waits less than this.
_MIN_TIMEOUT_S = 0.001


@dataclass(eq=False, slots=True)
class _Item:
    delivery: Delivery
    waiter: asyncio.Future[Outcome]
    deadline: float  # on the event loop's clock
    deadline_s: float


class HttpBatchTransport(HttpTransport):
    """Gathers the concurrent sends of one event loop into batches (``limits``) and POSTs each
    as one request. Each ``send`` keeps its own deadline and gets its own outcome: from the
    answer's ``results`` for that delivery, from the status for every delivery of the batch,
    or, when a batch of several is refused with a status that would dead-letter (400, 413,
    422, ...), from a request of its own made within its deadline (no attempt is spent). A
    consumer that answers 415 to a batch does not take batches: it is logged once, and this
    transport sends it single webhooks from then on (the batch's deliveries first).

    ``offered`` (an HTTP route without a ``batch`` key): single webhooks until an answer says
    ``siding-batch: v1`` (the consumer reads the envelope), batches from then on; a batch is
    ACKed only by a 2xx that says it too, otherwise its deliveries go again as single webhooks
    and so does everything after (an instance behind the URL does not read batches).
    """

    # A batch's whole answer is read, to give each delivery its own outcome.
    default_max_response_bytes = DEFAULT_MAX_ANSWER_BYTES

    def __init__(self, spec: WebhookSpec, *, limits: BatchLimits, offered: bool = False) -> None:
        super().__init__(spec)
        self.limits = limits
        self.offered = offered
        self.batching = not offered
        self._refused = False  # a 415 or an unsaid answer: single webhooks for good
        self._gatherer: Gatherer[_Item] | None = None
        self._gatherer_loop: asyncio.AbstractEventLoop | None = None
        self._posts: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return "Batch" + super().__repr__()

    async def send(self, delivery: Delivery, deadline_s: float) -> Outcome:
        if not self.batching:
            return await super().send(delivery, deadline_s)
        loop = asyncio.get_running_loop()
        wait = Expiry(deadline_s)
        waiter: asyncio.Future[Outcome] = loop.create_future()
        wait.waiter = waiter
        item = _Item(delivery, waiter, loop.time() + deadline_s, deadline_s)
        # One timer handle instead of asyncio.timeout: a fifth of the CPU a delivery costs here.
        timer = loop.call_later(deadline_s, wait.expire)
        self._gathering(loop).add(item, event_size(delivery), delivery.id)
        try:
            outcome = await waiter
            if outcome is SPLIT and not wait.expired:
                (outcome,) = await self._post([item])  # its own timeout ends with the deadline
            if outcome is UNBATCHED or outcome is UNSAID:
                self._fall_back(outcome)
                left = item.deadline - loop.time()
                if wait.expired or left <= 0:
                    return outcome_from_timeout(deadline_s)
                outcome = await super().send(delivery, left)
                return outcome_from_timeout(deadline_s) if outcome.no_answer else outcome
            return outcome
        finally:
            timer.cancel()
            if not waiter.done():
                waiter.cancel()  # a batch not yet posted leaves it out

    def _fall_back(self, why: Outcome) -> None:
        if self.batching:
            self.batching = False
            self._refused = True
            said = "answered 415 to" if why is UNBATCHED else "did not say 'siding-batch: v1' on"
            log.warning(
                "the consumer at %r %s a batch: its deliveries go one per request"
                " (single webhooks) from now on",
                self,
                said,
            )

    def _answered(self, headers: Mapping[str, str]) -> None:
        if self.offered and not self.batching and not self._refused and reads_batches(headers):
            self.batching = True
            log.info("the consumer at %r reads batches: its deliveries go in batches", self)

    def _gathering(self, loop: asyncio.AbstractEventLoop) -> Gatherer[_Item]:
        if self._gatherer is None or self._gatherer_loop is not loop:
            self._gatherer = Gatherer(self.limits, self._flush)
            self._gatherer_loop = loop
        return self._gatherer

    def _flush(self, items: list[_Item]) -> None:
        task = asyncio.get_running_loop().create_task(self._post_batch(items))
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)

    async def _post_batch(self, items: list[_Item]) -> None:
        live = [item for item in items if not item.waiter.done()]
        if not live:
            return

        def settle(n: int, outcome: Outcome) -> None:  # a streamed result, as it comes
            if not live[n].waiter.done():
                live[n].waiter.set_result(outcome)

        try:
            outcomes = await self._post(live, settle)
        except asyncio.CancelledError:
            _settle(live, [outcome_from_connection_error(TransportError("transport closed"))])
            raise
        except Exception as error:  # a bug must reach the senders, not leave them waiting
            for item in live:
                if not item.waiter.done():
                    item.waiter.set_exception(error)
            return
        _settle(live, outcomes)

    async def _post(
        self, items: list[_Item], settle: Callable[[int, Outcome], None] | None = None
    ) -> list[Outcome]:
        """POST ``items`` as one batch; one outcome per item, in order. When the consumer
        streams its results, ``settle`` is told each item's outcome as its line comes."""
        client = self._session()
        deliveries = [item.delivery for item in items]
        last = max(item.deadline for item in items)
        timeout_s = max(_MIN_TIMEOUT_S, last - asyncio.get_running_loop().time())
        body = envelope(deliveries, source=self._spec.source, event_type=self._spec.event_type)
        message_id, sent_s = batch_id(deliveries), int(time.time())
        headers = [
            ("content-type", BATCH_CONTENT_TYPE),
            ("webhook-id", message_id),
            ("webhook-timestamp", str(sent_s)),
            ("accept", BATCH_ACCEPT),
        ]
        if self._spec.secret is not None:
            signature = signing.sign(self._spec.secret, message_id, sent_s, body)
            headers.append(("webhook-signature", signature))
        if self._spec.bearer_token is not None:
            headers.append(("authorization", f"Bearer {self._spec.bearer_token}"))
        # No Idempotency-Key: a batch is made anew each time; each event's id is the key.
        headers += self._spec.headers
        sent = http_body(self.compression, body)
        headers += sent.headers
        try:
            async with client.request(
                self._spec.method,
                self._url,
                data=sent.data,
                headers=headers,
                allow_redirects=False,
                timeout=self._timeout(timeout_s),
            ) as response:
                status, answer_headers = response.status, response.headers
                if self._streams(status, response.content_type, answer_headers):
                    return await self._read_stream(response, items, settle)
                answer, complete = await read_body(response, self._max_response_bytes)
        except (aiohttp.ClientError, TimeoutError) as error:
            return [outcome_from_request_error(error, item.deadline_s) for item in items]
        if refused_encoding(status, sent):
            self.stop_compressing()
            return await self._post(items)  # once more, uncompressed, within the same deadlines
        text = "" if 200 <= status < 300 else excerpt(answer)
        return batch_outcomes(
            deliveries, status, answer_headers, answer, complete=complete, excerpt=text,
            now_s=time.time(), offered=self.offered,
        )  # fmt: skip

    def _streams(self, status: int, content_type: str, headers: Mapping[str, str]) -> bool:
        """Whether an answer is the stream of results (a 2xx of that type; on an offered batch
        only from a consumer that says it reads batches)."""
        said = not self.offered or reads_batches(headers)
        return 200 <= status < 300 and is_result_stream(content_type) and said

    async def _read_stream(
        self,
        response: aiohttp.ClientResponse,
        items: list[_Item],
        settle: Callable[[int, Outcome], None] | None,
    ) -> list[Outcome]:
        """Each item's outcome from its line, told to ``settle`` as it comes. An item no line
        answered is a RETRY when the stream ended, and what the break means when it broke
        (a suspect when the connection was lost): the others keep their answers."""
        where = {item.delivery.id: n for n, item in enumerate(items)}
        got: list[Outcome | None] = [None] * len(items)
        lines = ResultLines(self._max_response_bytes)

        def take(line: bytes) -> None:
            found = line_result(line)
            n = where.get(found[0]) if found is not None else None
            if found is None or n is None or got[n] is not None:
                return  # not one of this batch's, or its second line: the first counts
            got[n] = found[1]
            if settle is not None:
                settle(n, found[1])

        missing = Outcome(OutcomeKind.RETRY, NO_RESULT)
        try:
            async for chunk in response.content.iter_any():
                for line in lines.feed(chunk):
                    take(line)
            take(lines.rest())
        except LineTooLong as error:
            missing = Outcome(OutcomeKind.RETRY, str(error))
            response.close()  # not read to its end: not returned to the pool
        except (aiohttp.ClientError, TimeoutError) as error:
            return [
                outcome or outcome_from_request_error(error, items[n].deadline_s)
                for n, outcome in enumerate(got)
            ]
        return [outcome or missing for outcome in got]

    async def close(self) -> None:
        if self._gatherer is not None and self._gatherer_loop is asyncio.get_running_loop():
            closed = outcome_from_connection_error(TransportError("transport closed"))
            _settle(self._gatherer.take(), [closed])
        self._gatherer = self._gatherer_loop = None
        posts, self._posts = self._posts, set()
        for task in posts:
            task.cancel()
        if posts:
            await asyncio.gather(*posts, return_exceptions=True)
        await super().close()


def _settle(items: list[_Item], outcomes: list[Outcome]) -> None:
    """Each waiting sender gets its outcome (one outcome given for all: each gets that one)."""
    for n, item in enumerate(items):
        if not item.waiter.done():
            item.waiter.set_result(outcomes[n] if len(outcomes) > 1 else outcomes[0])
