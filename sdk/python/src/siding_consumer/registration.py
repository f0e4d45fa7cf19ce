"""Join a siding route with the address this service listens on, keep the lease, leave on stop
(docs/registration.md, "For SDK writers"). Standard library HTTP only; one background thread.

States: not joined -> joined (renewing every lease/3) -> stopped. A renewal answered 404 (the
lease lapsed, or an operator removed the instance) joins again at once; a connection error or a
5xx keeps the service running and tries again after a back-off (0.5 s, doubling, at most one
renewal interval); any other refusal (401, 403, 409 after a change of siding's settings) is
reported and retried the same way. Only the first join, in ``start``, raises on a refusal: that
is a mistake in the service's settings. The token is never logged, shown or put in an error.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from siding_consumer.errors import SidingError

log = logging.getLogger(__name__)

Transport = Literal["grpc", "grpcs", "http", "https"]
EventKind = Literal["joined", "lapsed", "unreachable", "refused", "left"]

FIRST_RETRY_S = 0.5
NO_LEASE_EVERY_S = 5.0  # the retry ceiling before a join has told us the lease


class RegistrationError(SidingError):
    """siding refused a join: ``status`` is its HTTP status, the message its reason."""

    def __init__(self, route: str, status: int, reason: str) -> None:
        super().__init__(f"joining route {route} was refused ({status}): {reason}")
        self.route = route
        self.status = status


@dataclass(frozen=True, slots=True)
class RegistrationEvent:
    """What happened to a registration, for logs and metrics. ``status`` is siding's HTTP status
    when it answered; ``detail`` its reason or the connection error."""

    kind: EventKind
    route: str
    consumer: str | None
    status: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Join:
    """Settings for ``ConsumerServer(..., join=Join(...))``: join ``route`` of the siding whose
    control API is at ``control_url`` once the server listens. ``address`` is how siding reaches
    this service (``host:port``); by default the server's listen host (this machine's host name
    when it listens on every interface) and its port."""

    control_url: str
    route: str
    token: str = field(repr=False)
    address: str | None = None
    capacity: int | None = None
    on_event: Callable[[RegistrationEvent], None] | None = field(default=None, repr=False)


def consumers_url(control_url: str, route: str) -> str:
    return f"{control_url.rstrip('/')}/routes/{urllib.parse.quote(route, safe='')}/consumers"


def join_body(address: str, transport: Transport | None, capacity: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"address": address}
    if transport is not None:
        body["transport"] = transport
    if capacity is not None:
        body["capacity"] = capacity
    return body


def renew_every(lease_s: float) -> float:
    """How often a lease of ``lease_s`` seconds is renewed: three times per lease."""
    return lease_s / 3


def retry_after(failures: int, every_s: float) -> float:
    """The wait after ``failures`` failed calls in a row: 0.5 s, doubling, at most ``every_s``."""
    return min(every_s, FIRST_RETRY_S * 2.0 ** max(0, failures - 1))


def advertised(listen: str, port: int) -> str:
    """``host:port`` that siding should dial for a server listening on ``listen``."""
    host = listen.rpartition(":")[0]
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = socket.gethostname()
    return f"{host}:{port}"


class _Unreachable(Exception):
    """No answer, or a 5xx: try again later."""

    def __init__(self, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.status = status


class Registration:
    """One instance's registration on one route: ``start()`` joins (and renews in the
    background), ``stop()`` leaves. Also a context manager.

    ``address`` is ``host:port`` (``host:port/path`` for HTTP) or a whole endpoint URL;
    ``transport`` is ``grpc`` (siding's default), ``grpcs``, ``http`` or ``https``.
    """

    def __init__(
        self,
        control_url: str,
        route: str,
        token: str,
        address: str,
        *,
        transport: Transport | None = None,
        capacity: int | None = None,
        timeout_s: float = 10.0,
        on_event: Callable[[RegistrationEvent], None] | None = None,
    ) -> None:
        if not token:
            raise SidingError(f"joining route {route} needs its registration token")
        self.route = route
        self._url = consumers_url(control_url, route)
        self._token = token
        self._body = join_body(address, transport, capacity)
        self._timeout_s = timeout_s
        self._on_event = on_event
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.consumer: str | None = None
        self.lease_s: float | None = None
        self._failures = 0  # calls failed in a row; the renewing thread's after start

    def __repr__(self) -> str:
        return f"Registration(route={self.route!r}, consumer={self.consumer!r})"

    @property
    def every_s(self) -> float:
        return NO_LEASE_EVERY_S if self.lease_s is None else renew_every(self.lease_s)

    def start(self) -> None:
        """Join now; raises ``RegistrationError`` when siding refuses (a wrong token, no such
        route, a bad address). When siding cannot be reached the join is retried in the
        background and ``start`` returns."""
        if self._thread is not None:
            raise SidingError("the registration is already started")
        try:
            self._join()
        except _Unreachable as exc:
            self._failures = 1
            self._event("unreachable", exc.status, str(exc))
        self._thread = threading.Thread(
            target=self._keep, name=f"siding-join-{self.route}", daemon=True
        )
        self._thread.start()

    def stop(self, *, leave: bool = True) -> None:
        """Stop renewing and leave the route (``leave=False``: let the lease lapse instead)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        consumer, self.consumer = self.consumer, None
        if not leave or consumer is None:
            return
        try:
            status, answer = self._call("DELETE", f"{self._url}/{consumer}")
        except _Unreachable as exc:
            log.warning("leaving route %s: %s (the lease will lapse)", self.route, exc)
            return
        if status in {200, 404}:
            self._event("left", status, "", consumer)
        else:
            self._event("refused", status, _reason(answer), consumer)

    def __enter__(self) -> Registration:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _keep(self) -> None:
        while not self._stopping.wait(
            self.every_s if self._failures == 0 else retry_after(self._failures, self.every_s)
        ):
            try:
                if self.consumer is None or not self._renew():
                    self._join()
                self._failures = 0
            except _Unreachable as exc:
                self._failures += 1
                self._event("unreachable", exc.status, str(exc))
            except RegistrationError as exc:
                self._failures += 1
                self._event("refused", exc.status, str(exc))

    def _join(self) -> None:
        status, answer = self._call("POST", self._url, self._body)
        if status not in (200, 201):
            raise RegistrationError(self.route, status, _reason(answer))
        self.consumer = str(answer["consumer"])
        self.lease_s = float(answer["lease_s"])
        self._event("joined", status, str(answer.get("address", "")))

    def _renew(self) -> bool:
        """False when the lease is gone (404): join again."""
        status, answer = self._call("PUT", f"{self._url}/{self.consumer}")
        if status == 404:
            self._event("lapsed", status, _reason(answer))
            self.consumer = None
            return False
        if status != 200:
            raise RegistrationError(self.route, status, _reason(answer))
        self.lease_s = float(answer.get("lease_s", self.lease_s or 0)) or self.lease_s
        return True

    def _call(self, method: str, url: str, body: object = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return response.status, _json(response.read())
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, _json(exc.read())
            exc.close()
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, timeout
            raise _Unreachable(f"siding's control API cannot be reached: {_text(exc)}") from None
        if status >= 500:
            raise _Unreachable(f"siding answered {status}: {_reason(answer)}", status)
        return status, answer

    def _event(
        self, kind: EventKind, status: int | None, detail: str, consumer: str | None = None
    ) -> None:
        event = RegistrationEvent(kind, self.route, consumer or self.consumer, status, detail)
        level = {"joined": logging.INFO, "left": logging.INFO, "refused": logging.ERROR}
        log.log(
            level.get(kind, logging.WARNING),
            "route %s, consumer %s: %s%s",
            self.route,
            event.consumer,
            kind,
            f" ({detail})" if detail else "",
        )
        if self._on_event is not None:
            self._on_event(event)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {"error": raw[:200].decode(errors="replace")}
    return data if isinstance(data, dict) else {"error": str(data)[:200]}


def _reason(answer: dict[str, Any]) -> str:
    return str(answer.get("error", answer))


def _text(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, str):
        return str(exc.reason)
    return str(exc)
