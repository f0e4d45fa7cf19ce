"""The one root of every exception siding raises, the consumer SDK's and the proxy's alike.

The proxy (``siding.errors``) builds its own errors on this root, so ``except SidingError``
catches anything from either.
"""

from __future__ import annotations


class SidingError(Exception):
    """Root of all siding errors; ``retriable`` says whether trying again could help."""

    retriable: bool = False


class ConfigError(SidingError):
    """A setting is invalid; ``key`` names the offending setting (dotted path)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.message = message
