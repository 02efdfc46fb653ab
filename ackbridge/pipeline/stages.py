"""The I/O-free rules of the pipeline's other stages: a throttle (token bucket) and a
circuit breaker. The faces wait as these say (a thread sleeps, a task awaits); the
rules are written once here.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

log = logging.getLogger("ackbridge.pipeline")


class Throttle:
    """At most ``rate`` handler runs per second, ``burst`` of them back to back."""

    __slots__ = ("_at", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: int = 1) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a throttle needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._at: float | None = None

    def take(self, now: float) -> float:
        """Take a token at *now* (monotonic s); the seconds to wait before running (0: run now)."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class Circuit(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass
class CircuitBreaker:
    """After ``failures`` handler failures in a row the circuit opens: the pipeline
    stops running the handler (the consumer takes nothing more: its deliveries wait
    on the broker and in the prefetch) for ``cooldown`` seconds, then lets one
    delivery through as a probe. The probe's success closes it; its failure opens it
    again. A failure here still goes through the redelivery policy."""

    failures: int = 5
    cooldown: float = 30.0
    state: Circuit = Circuit.CLOSED
    _failed: int = 0
    _opened_at: float = 0.0

    def __post_init__(self) -> None:
        if self.failures < 1 or self.cooldown < 0:
            raise ValueError("a circuit breaker needs failures >= 1 and cooldown >= 0")

    def wait(self, now: float) -> float:
        """Seconds to wait before the next run may start (0: now; a run after an open
        period is the probe)."""
        if self.state is Circuit.OPEN:
            left = self._opened_at + self.cooldown - now
            if left > 0:
                return left
            self._move(Circuit.HALF_OPEN)
        return 0.0

    def succeeded(self) -> None:
        self._failed = 0
        if self.state is not Circuit.CLOSED:
            self._move(Circuit.CLOSED)

    def failed(self, now: float) -> None:
        self._failed += 1
        if self.state is Circuit.HALF_OPEN or self._failed >= self.failures:
            self._opened_at = now
            if self.state is not Circuit.OPEN:
                self._move(Circuit.OPEN)

    def _move(self, state: Circuit) -> None:
        log.warning("ackbridge.pipeline: circuit %s -> %s after %d failure(s) in a row", self.state.value,
                    state.value, self._failed)
        self.state = state
