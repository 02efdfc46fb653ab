"""The proton Container thread: the one thread that touches proton objects.

Application threads never call proton. They queue work with
:meth:`ContainerThread.submit` (or :meth:`~ContainerThread.call` for work that
answers through a future) and wake the container with one ``ApplicationEvent``
per batch through an ``EventInjector``; the handler's ``on_ackbridge_work``
runs the batch (:meth:`~ContainerThread.run_work`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from proton import Handler
from proton.reactor import ApplicationEvent, Container, EventInjector

from ackbridge.errors import ConnectionLostError

log = logging.getLogger("ackbridge.amqp10")

T = TypeVar("T")

WORK_EVENT = "ackbridge_work"


class _Timer(Handler):
    """A container timer task."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn

    def on_timer_task(self, event: Any) -> None:
        self._fn()


class ContainerThread:
    """One proton Container run on its own daemon thread.

    *recover* is called (on the container thread) with a description when
    dispatching an event raised: ``Container.run()`` would end there, and with
    it every link of the transport for good; the transport drops the
    connection instead and makes a new one, as after a network fault.
    *last* is called on the container thread when its loop ends (the
    transport hands over events it still holds: see bursts.py)."""

    def __init__(self, handler: Any, *, what: str, timeout: float, recover: Callable[[str], None],
                 scrub: Callable[[str], str], last: Callable[[], None] = lambda: None) -> None:
        self._handler = handler
        self._last = last
        self._what = what  # the redacted URL, for errors
        self._timeout = timeout
        self._recover = recover
        self._scrub = scrub
        self.container: Container | None = None
        self._injector: EventInjector | None = None
        self._thread: threading.Thread | None = None
        self._work: deque[Callable[[], None]] = deque()
        self._work_lock = threading.Lock()
        self._wake_pending = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def running(self) -> bool:
        """Whether work can still be submitted."""
        return self._injector is not None

    def start(self) -> None:
        container = Container(self._handler)
        container.container_id = f"ackbridge-{uuid.uuid4().hex[:12]}"
        self._injector = EventInjector()
        container.selectable(self._injector)
        self.container = container
        self._thread = threading.Thread(target=self._loop, name="ackbridge-amqp10", daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        """The container thread's ident, once started."""
        thread = self._thread
        return thread.ident if thread is not None else None

    def on_thread(self) -> bool:
        thread = self._thread
        return thread is not None and threading.get_ident() == thread.ident

    # ---- handing work over -------------------------------------------------------
    def submit(self, fn: Callable[[], None]) -> None:
        """Run *fn* on the container thread (in submission order)."""
        injector = self._injector
        if injector is None:
            raise ConnectionLostError(f"{self._what}: transport is not open")
        with self._work_lock:
            self._work.append(fn)
            if self._wake_pending:
                return
            self._wake_pending = True
        injector.trigger(ApplicationEvent(WORK_EVENT))

    def call(self, fn: Callable[[Future[T]], None]) -> Future[T]:
        """Run ``fn(future)`` on the container thread; *fn* completes the future
        (an exception it raises completes it too)."""
        future: Future[T] = Future()

        def run() -> None:
            if future.done():
                return
            try:
                fn(future)
            except BaseException as exc:  # surfaced to the caller, never kills the loop
                if not future.done():
                    future.set_exception(exc)

        if self.on_thread():
            run()
        else:
            self.submit(run)
        return future

    def wait(self, future: Future[T], what: str, *, spare: float = 0.0) -> T:
        """The future's result, or ConnectionLostError after ``connect_timeout`` (plus *spare*)."""
        try:
            return future.result(self._timeout + spare)
        except TimeoutError:
            future.cancel()
            raise self.no_answer(what) from None

    def no_answer(self, what: str) -> ConnectionLostError:
        return ConnectionLostError(f"{self._what}: no answer from the broker to {what} within {self._timeout} s")

    def run_work(self) -> None:
        """The handler calls this for each wake-up event."""
        with self._work_lock:
            batch = list(self._work)
            self._work.clear()
            self._wake_pending = False
        for fn in batch:
            try:
                fn()
            except Exception:  # a work item must never stop the container
                log.exception("ackbridge amqp10 work item failed")

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        """Run *fn* on the container thread after *delay* seconds (call it there)."""
        assert self.container is not None
        self.container.schedule(delay, _Timer(fn))

    # ---- the loop ------------------------------------------------------------------
    def _loop(self) -> None:
        # Container.run() without its fragility: see the class docstring.
        container = self.container
        assert container is not None
        try:
            container.timeout = 3.14159265359
            container.start()
            while True:
                try:
                    if not container.process():
                        break
                except Exception as exc:
                    self._recover(f"{type(exc).__name__}: {exc}")
            container.stop()
            container.process()
        except Exception as exc:
            log.error("ackbridge amqp10 container stopped: %s", self._scrub(f"{type(exc).__name__}: {exc}"))
        finally:
            try:
                self._last()
            except Exception:
                log.exception("ackbridge amqp10: handing over the last events failed")
            self._injector = None

    def stop(self, before: Callable[[], None]) -> None:
        """Run *before* on the container thread, stop the container and join the thread."""

        def stop() -> None:
            before()
            if self._injector is not None:
                self._injector.close()
            if self.container is not None:
                self.container.stop()

        try:
            self.submit(stop)
        except ConnectionLostError:
            pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None
