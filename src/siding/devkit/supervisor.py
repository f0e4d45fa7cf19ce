"""A supervisor for a simulated consumer process: what Kubernetes does to a crashing pod.

Each time the process exits (a crash, a kill), it is started again ``restart_s`` later on the same
port, until ``stop``. Used by the crash tests and the poison-pill demo.
"""

from __future__ import annotations

import threading
import time

from siding.devkit.sim_consumer import SimConsumerProcess

POLL_S = 0.02


class Supervisor:
    def __init__(self, consumer: SimConsumerProcess, restart_s: float = 2.0) -> None:
        self.consumer = consumer
        self.restart_s = restart_s
        self.exits: list[tuple[float, int]] = []  # (epoch s, exit code) of each exit
        self.restarts: list[float] = []  # epoch s at which each restart was serving again
        self.errors: list[BaseException] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="siding-supervisor", daemon=True)

    @property
    def deaths(self) -> int:
        return len(self.exits)

    def start(self) -> Supervisor:
        self.consumer.start()
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stopping.is_set():
            code = self.consumer.exit_code()
            if code is None:
                self._stopping.wait(POLL_S)
                continue
            self.exits.append((time.time(), code))
            self.consumer.stop()  # reap it and forget it
            if self._stopping.wait(self.restart_s):
                return
            try:
                self.consumer.start()
                self.restarts.append(time.time())
            except Exception as error:  # kept for the test to report
                self.errors.append(error)
                return

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)
        self.consumer.stop()

    def __enter__(self) -> Supervisor:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
