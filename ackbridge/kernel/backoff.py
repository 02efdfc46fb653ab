"""Reconnect back-off: one schedule and one set of defaults for every plugin.

Delays double from :data:`INITIAL_DELAY` up to the connection option
``reconnect_max_delay`` and return to the start after a success. A plugin that
reconnects asks this object how long to wait; it never codes its own doubling.
"""

from __future__ import annotations

import random

INITIAL_DELAY = 0.1
DEFAULT_MAX_DELAY = 10.0


class Backoff:
    """Doubling delays with a ceiling and a little jitter (so many clients cut
    off together do not come back in lockstep)."""

    __slots__ = ("_next", "initial", "max_delay")

    def __init__(self, max_delay: float = DEFAULT_MAX_DELAY, initial: float = INITIAL_DELAY) -> None:
        if initial <= 0 or max_delay < initial:
            raise ValueError("back-off needs 0 < initial <= max_delay")
        self.initial = initial
        self.max_delay = max_delay
        self._next = initial

    def next_delay(self) -> float:
        """The wait before the next attempt; each call doubles the one after."""
        delay = self._next
        self._next = min(delay * 2, self.max_delay)
        return min(delay * random.uniform(0.9, 1.1), self.max_delay)

    def reset(self) -> None:
        """Call after a successful (re)connect."""
        self._next = self.initial

    def __repr__(self) -> str:
        return f"Backoff(next={self._next:.3g}s, max={self.max_delay:.3g}s)"
