"""Errors of the dispatch package."""

from __future__ import annotations

from siding.errors import SidingError


class DispatchInterrupted(SidingError):
    """The caller asked the dispatch to stop before every item had its step: do not commit."""

    retriable = True
