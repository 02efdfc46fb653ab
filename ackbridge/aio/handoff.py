"""The asyncio face's I/O-thread hand-off: transport events onto the event loop.

A transport reports events from whichever thread it runs (pika's, paho's,
proton's, or the loop itself). The async face's state may only be touched on
its loop, so :class:`LoopEvents` hands each event to the
:class:`~ackbridge.engine.connection.EventRouter` through a :class:`LoopHandoff`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ackbridge.errors import AckbridgeError
from ackbridge.messages import ConfirmOutcome, InboundMessage

if TYPE_CHECKING:
    from ackbridge.engine.connection import EventRouter


class LoopHandoff:
    """Calls ``fn(*args)`` on *loop*: at once when called on the loop's own thread,
    else queued, in call order, with one wake-up of the loop per burst."""

    __slots__ = ("_inbound", "_loop", "_loop_thread", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread
        self._inbound: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._scheduled = False

    def __call__(self, fn: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            fn(*args)
            return
        # One call_soon_threadsafe per delivery was the async face's main cost over
        # the sync one. One queue keeps the order of deliveries, confirms and
        # generation ends as the transport reported them.
        self._inbound.append((fn, args))
        if not self._scheduled:
            self._scheduled = True
            if not self._loop.is_closed():
                try:
                    self._loop.call_soon_threadsafe(self._drain)
                except RuntimeError:
                    pass  # the loop closed meanwhile: nothing is waiting for these events

    def _drain(self) -> None:
        inbound = self._inbound
        # Cleared before draining: an event queued while we drain schedules another
        # pass, or is picked up by this one; none is left behind.
        self._scheduled = False
        for _ in range(len(inbound)):
            fn, args = inbound.popleft()
            fn(*args)


class LoopEvents:
    """The ``TransportEvents`` of an async connection, callable from any thread:
    each event reaches the router on the loop."""

    __slots__ = ("_deliver", "_hop", "_loop_thread", "_router")

    def __init__(self, router: EventRouter, hop: LoopHandoff) -> None:
        self._router = router
        self._hop = hop
        self._deliver = router.deliver
        self._loop_thread = hop._loop_thread

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        # The per-message event: a transport on the loop (nats-py, rstream) delivers
        # straight to the router, without the hand-off's call.
        if threading.get_ident() == self._loop_thread:
            self._deliver(subscription, message)
        else:
            self._hop(self._deliver, subscription, message)

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        self._hop(self._router.confirm, seq, outcome)

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        self._hop(self._router.confirm_batch, list(outcomes))

    def failed(self, error: AckbridgeError, subscription: str | None = None) -> None:
        self._hop(self._router.failed, error, subscription)

    def generation_ended(self, generation: int, reason: str) -> None:
        self._hop(self._router.generation_ended, generation, reason)

    def reply(self, message: InboundMessage) -> None:
        self._hop(self._router.reply, message)
