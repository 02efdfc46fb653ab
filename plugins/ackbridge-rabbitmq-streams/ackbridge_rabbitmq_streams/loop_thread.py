"""An asyncio event loop on a thread of its own, for the offset log over rstream.

rstream is asyncio-only and its connection needs a running loop between calls
(it answers heartbeats and reads frames as they come), so the blocking
:class:`~ackbridge_rabbitmq_streams.offset_log.StreamOffsetLog` keeps one loop
running on a daemon thread and hands it coroutines. (The blocking transport
uses the core's :class:`~ackbridge.transport.loop_thread.LoopThreadTransport`;
that module offers a sync *transport* over an async one, not a bare loop that
an offset log, which is no transport, could use.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One running event loop and the thread it runs on."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def on_loop(self) -> bool:
        """True when called from the loop's own thread (where waiting for it would deadlock)."""
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run *coro* on the loop and wait for its result (TimeoutError after *timeout* s)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start *coro* on the loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Stop the loop and join its thread. Stopping twice is harmless."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.on_loop():
            self._thread.join(5)
            if not self._thread.is_alive():
                self.loop.close()
