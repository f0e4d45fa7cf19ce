"""A headless Chromium driven over the DevTools protocol, as a person would use a page: read
what it shows, type into a field, click a button at its place on the screen, take a screenshot.

Only what the console tests need; the protocol goes over aiohttp's websocket client on a loop of
its own, so tests call plain methods.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

T = TypeVar("T")
_LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")


class BrowserError(AssertionError):
    pass


class Page:
    """One tab of a headless Chromium; ``with Page.open(url, tmp) as page:``."""

    def __init__(self, process: subprocess.Popen[bytes], page_ws: str) -> None:
        self._process = process
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._ids = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._run(self._connect(page_ws))

    @classmethod
    def open(cls, url: str, profile: Path, size: tuple[int, int] = (1400, 1000)) -> Page:
        chromium = shutil.which("chromium")
        if chromium is None:
            raise BrowserError("chromium not found")
        process = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        browser_ws = _devtools_address(process)
        port = browser_ws.split("//", 1)[1].split("/", 1)[0]
        request = urllib.request.Request(f"http://{port}/json/new?{url}", method="PUT")
        with urllib.request.urlopen(request, timeout=30) as answer:
            target = json.load(answer)
        page = cls(process, target["webSocketDebuggerUrl"])
        try:
            page._wait_loaded(url)
        except BaseException:
            page.close()
            raise
        return page

    def _wait_loaded(self, url: str, timeout_s: float = 30.0) -> None:
        """Until the tab shows ``url`` fully parsed: the tab starts on a blank document and an
        expression evaluated while it navigates sees no ``document.body`` (or a context that is
        being replaced), so nothing is read from the page before this."""
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
            " && document.body !== null",
            timeout_s,
            navigating=True,
        )

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._run(self._disconnect())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
            if self._process.stderr is not None:
                self._process.stderr.close()

    # -- what a person does -------------------------------------------------------------------

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        answer = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0, navigating: bool = False) -> Any:
        """Until ``expression`` is truthy in the page; its value. ``navigating``: an error
        (the page not there yet) counts as not true yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = None
            with contextlib.suppress(*((BrowserError,) if navigating else ())):
                value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"not true within {timeout_s} s: {expression}")
            time.sleep(0.2)

    def click(self, selector: str) -> None:
        """A left click in the middle of the element, through the mouse, not the DOM."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise BrowserError(f"nothing on the page matches {selector}")
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )

    def type_into(self, selector: str, text: str) -> None:
        """Focus the field by clicking it and type ``text``, then leave it (a change event)."""
        self.click(selector)
        self.send("Input.insertText", {"text": text})
        self.evaluate(f"document.querySelector({json.dumps(selector)}).blur()")

    def screenshot(self, path: Path) -> None:
        answer = self.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(answer["data"]))

    # -- the protocol --------------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._run(self._call(method, params or {}))

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    async def _connect(self, page_ws: str) -> None:
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(page_ws, max_msg_size=0)
        self._loop.create_task(self._read())

    async def _disconnect(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            future = self._pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self._ws is not None
        self._ids += 1
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[self._ids] = future
        await self._ws.send_str(json.dumps({"id": self._ids, "method": method, "params": params}))
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result


def _devtools_address(process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = process.stderr.readline().decode(errors="replace")
        if not line and process.poll() is not None:
            break
        seen.append(line)
        found = _LISTENING.search(line)
        if found:
            # Keep draining stderr so the browser never blocks on a full pipe.
            threading.Thread(target=_drain, args=(process,), daemon=True).start()
            return found.group(1)
    raise BrowserError("chromium did not start its DevTools server: " + "".join(seen)[-2000:])


def _drain(process: subprocess.Popen[bytes]) -> None:
    assert process.stderr is not None
    with contextlib.suppress(ValueError, OSError):  # closed by ``Page.close``
        for _ in process.stderr:
            pass
