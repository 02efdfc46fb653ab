"""``ackbridge consume``'s loop, stopped gracefully by SIGTERM or SIGINT.

The first signal starts ``consumer.drain()`` on a thread of its own (a signal
handler runs on the main thread, which is the one settling the deliveries, so
it must not wait there): nothing more is handed out, the delivery being worked
on is settled as ``--mode`` says, what was prefetched goes back to the broker
unsettled, and the command prints its summary and exits 0. A second signal
stops at once (KeyboardInterrupt): whatever is unsettled still goes back to
the broker, never acked or dead-lettered (ackbridge.kernel.interruptions), and
the summary of what was counted so far is still printed (``forced``), exit 130.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ackbridge.cli.roundtrip import Tally, settle_as
from ackbridge.errors import ConsumerClosedError
from ackbridge.kernel.settlement import DrainResult
from ackbridge.sync.connection import Connection
from ackbridge.sync.consumer import Consumer

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Stopping:
    """The drain a signal started, and which signal it was."""

    consumer: Consumer
    timeout: float
    signal_name: str | None = None
    result: DrainResult | None = None
    #: A second signal stopped the run before the drain ended (the counts are partial).
    forced: bool = False
    thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        with self._lock:
            if self.thread is not None:
                raise KeyboardInterrupt  # the second signal: stop now
            self.signal_name = signal.Signals(signum).name
            self.thread = threading.Thread(target=self._drain, name="ackbridge-cli-drain", daemon=True)
            self.thread.start()

    def _drain(self) -> None:
        self.result = self.consumer.drain(self.timeout)

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()


def installed(handler: Callable[[int, FrameType | None], None]) -> dict[int, Any]:
    """Install *handler* for SIGTERM and SIGINT (main thread only); the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum in SIGNALS}


def consume_until_stopped(conn: Connection, source: str, tally: Tally, *, expect: int, mode: str, prefetch: int,
                          idle_timeout: float, work_s: float, drain_timeout: float,
                          advance: Callable[[int], None]) -> Stopping:
    """Consume up to *expect* deliveries (settling each as *mode* says, after *work_s*
    of simulated work) until idle for *idle_timeout*, or until a signal drains it.
    A second signal returns at once with ``forced`` set, so the caller still reports
    what *tally* counted; the subscription ends on the way out (unsettled deliveries
    go back to the broker)."""
    started: list[Stopping] = []
    try:
        with conn.consume(source, prefetch=prefetch) as consumer:
            stopping = Stopping(consumer, drain_timeout)
            started.append(stopping)
            previous = installed(stopping.on_signal)
            try:
                while tally.received < expect:
                    delivery = consumer.get(timeout=idle_timeout)
                    if delivery is None:
                        break
                    tally.receive(delivery)
                    if work_s:
                        time.sleep(work_s)
                    try:
                        settled = settle_as(delivery, mode)
                    except ConsumerClosedError:
                        break  # the drain's deadline passed first: the broker redelivers it
                    if settled:
                        tally.settled += 1
                    advance(1)
                stopping.wait()
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
    except KeyboardInterrupt:
        # Only the second of our signals is ours to absorb; any other Ctrl-C (before the
        # handlers were installed) stays a plain interruption.
        if not started or started[0].signal_name is None:
            raise
        started[0].forced = True
    return started[0]
