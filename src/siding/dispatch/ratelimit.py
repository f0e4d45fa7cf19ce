"""A token bucket: at most ``rate`` sends per second on average, bursts of at most ``burst``."""

from __future__ import annotations

import time
from collections.abc import Callable

from siding.errors import ConfigError

# Clock arithmetic in floats leaves a token at 0.9999999999: that is a token.
_EPSILON = 1e-9


def default_burst(rate: float) -> float:
    """A tenth of a second's worth of sends, at least one."""
    return max(1.0, rate / 10)


class TokenBucket:
    """Starts full. ``clock`` is monotonic seconds (injectable for tests)."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ConfigError("rate_limit", "must be positive (0 turns the limit off)")
        self._rate = rate
        self._burst = default_burst(rate) if burst is None else burst
        if self._burst < 1:
            raise ConfigError("rate_burst", "must be at least 1")
        self._clock = clock
        self._tokens = self._burst
        self._at = clock()

    @property
    def rate(self) -> float:
        return self._rate

    def wait_s(self) -> float:
        """Seconds until a token is available (0 when one is available now)."""
        self._refill()
        return 0.0 if self._tokens >= 1 - _EPSILON else (1 - self._tokens) / self._rate

    def try_take(self) -> bool:
        """Take a token if one is available now."""
        self._refill()
        if self._tokens < 1 - _EPSILON:
            return False
        self._tokens -= 1
        return True

    def _refill(self) -> None:
        now = self._clock()
        if now > self._at:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = max(self._at, now)
