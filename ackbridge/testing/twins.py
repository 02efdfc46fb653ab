"""Drive the async client through a sync facade, so one test body checks both twins.

The facade runs every call on a private event loop thread and wraps what comes
back, keeping the method names: a test written against the sync API therefore
exercises the async classes with exactly the same names (a parity check).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

from ackbridge.aio.connection import AsyncConfirm, AsyncConnection, AsyncConsumer, AsyncDelivery, AsyncPublisher
from ackbridge.connect import connect, connect_async

_ASYNC_TYPES = (AsyncConnection, AsyncConsumer, AsyncDelivery, AsyncPublisher, AsyncConfirm)


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ackbridge-twin-loop", daemon=True)
        self.thread.start()

    def run(self, fn: Callable[[], Any], timeout: float = 120.0) -> Any:
        async def call() -> Any:
            result = fn()
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()  # releases its self-pipe sockets (else a ResourceWarning at GC)


class SyncFacade:
    """Sync view of an async ackbridge object."""

    def __init__(self, target: Any, runner: LoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_runner", runner)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return _wrap(attr, self._runner)

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(unwrap(a) for a in args)
            return _wrap(self._runner.run(lambda: attr(*args, **kwargs)), self._runner)

        return call

    def __repr__(self) -> str:
        return repr(self._target)

    def __enter__(self) -> SyncFacade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wrap(value: Any, runner: LoopThread) -> Any:
    if isinstance(value, _ASYNC_TYPES):
        return SyncFacade(value, runner)
    return value


def unwrap(value: Any) -> Any:
    return value._target if isinstance(value, SyncFacade) else value


class Twin:
    """Opens connections with either the sync client or the async one behind a facade."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._runner: LoopThread | None = LoopThread() if kind == "async" else None

    def connect(self, url: str, **options: Any) -> Any:
        if self._runner is None:
            return connect(url, **options)
        return SyncFacade(self._runner.run(lambda: connect_async(url, **options)), self._runner)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Call *fn* where this twin's objects live (the async twin: on its loop,
        awaiting what it returns), with the async objects themselves (``unwrap``)."""
        if self._runner is None:
            return fn()
        return self._runner.run(fn)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.stop()
