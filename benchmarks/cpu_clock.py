"""Process CPU time over the section a benchmark function times, without rewriting it.

The benchmark modules (rabbitmq_bench.py, nats_bench.py ...) time their work
between two ``time.perf_counter()`` calls and return a rate. :func:`install`
puts :data:`CLOCK` in place of their ``time`` module: each ``perf_counter()``
call also reads the process CPU clock (every thread of this process), so the
CPU spent between the last two calls -- the timed section, after any filling
or set-up the function does first -- is known as well.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One side's run: process CPU seconds and wall seconds over its timed section, for n messages."""

    cpu: float
    wall: float
    n: int

    @property
    def us_per_message(self) -> float:
        return self.cpu / self.n * 1e6

    @property
    def rate(self) -> float:
        return self.n / self.wall


class CpuClock:
    """Stands in for the ``time`` module: ``perf_counter`` also records the process CPU clock."""

    def __init__(self) -> None:
        self._marks: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def perf_counter(self) -> float:
        wall, cpu = time.perf_counter(), time.process_time()
        with self._lock:  # marks come from the caller's thread and from clients' I/O threads
            self._marks.append((wall, cpu))
        return wall

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)  # sleep, time, process_time ... unchanged

    def measure(self, work: Callable[[int], object], n: int) -> Sample:
        """Run ``work(n)``; the CPU and wall time between its last two perf_counter() calls."""
        with self._lock:
            self._marks.clear()
        work(n)
        with self._lock:
            marks = list(self._marks)
        if len(marks) < 2:
            raise RuntimeError(f"{work!r} read perf_counter() {len(marks)} time(s); it must time its work")
        (wall0, cpu0), (wall1, cpu1) = marks[-2], marks[-1]
        return Sample(cpu1 - cpu0, wall1 - wall0, n)


CLOCK = CpuClock()


def install(*modules: types.ModuleType) -> None:
    """Make *modules* (benchmark modules that ``import time``) read :data:`CLOCK`."""
    for module in modules:
        module.time = CLOCK  # type: ignore[attr-defined]
