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


class Schedule:
    """The delays between a failed attempt and the next one, for the redelivery
    policy (:mod:`ackbridge.pipeline`): fixed, exponential with jitter, or an
    explicit list. ``delay(n)`` is the wait after the *n*-th failed attempt (1-based);
    ``levels`` bounds how many distinct delays there are, so an emulation can keep
    one delay queue per level (kombu's delay levels) and the delays within one level
    stay in arrival order."""

    __slots__ = ("_delays", "jitter")

    def __init__(self, delays: tuple[float, ...], jitter: float = 0.0) -> None:
        if not delays or any(d < 0 for d in delays):
            raise ValueError("a schedule needs at least one delay, none negative")
        if not 0.0 <= jitter < 1.0:
            raise ValueError("jitter is a fraction in [0, 1)")
        self._delays = delays
        self.jitter = jitter

    @classmethod
    def fixed(cls, delay: float, *, jitter: float = 0.0) -> Schedule:
        """The same *delay* after every failed attempt."""
        return cls((delay,), jitter)

    @classmethod
    def exponential(cls, initial: float, *, factor: float = 2.0, max_delay: float = 3600.0,
                    levels: int = 8, jitter: float = 0.1) -> Schedule:
        """*initial*, times *factor* after each failure, up to *max_delay*; *levels*
        distinct delays at most (the last repeats). *jitter*: each delay is moved by up
        to this fraction either way (so consumers failing together do not retry together)."""
        if initial <= 0 or factor < 1 or levels < 1:
            raise ValueError("exponential back-off needs initial > 0, factor >= 1, levels >= 1")
        return cls(tuple(min(initial * factor ** n, max_delay) for n in range(levels)), jitter)

    @classmethod
    def explicit(cls, delays: list[float] | tuple[float, ...], *, jitter: float = 0.0) -> Schedule:
        """These delays in turn (``[1, 10, 60]``); the last repeats."""
        return cls(tuple(float(d) for d in delays), jitter)

    @property
    def levels(self) -> tuple[float, ...]:
        """The distinct delays, without jitter, in order."""
        return self._delays

    def level(self, failed: int) -> int:
        """The index into :attr:`levels` of the wait after the *failed*-th failure."""
        if failed < 1:
            raise ValueError("attempts count from 1")
        return min(failed, len(self._delays)) - 1

    def delay(self, failed: int) -> float:
        """The wait after the *failed*-th failed attempt, jitter applied."""
        base = self._delays[self.level(failed)]
        return base * random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else base

    def __repr__(self) -> str:
        return f"Schedule({list(self._delays)}, jitter={self.jitter})"
