"""Receiver sessions we ended whose ``end`` the broker has not answered yet (container
thread only).

Why a detach and a close wait for that answer: RabbitMQ 3.10 applies a session's
dispositions in the session's own process, in frame order, and answers our
``end`` only after every frame before it. A connection ``close`` is answered at
once by the connection's process; the client then drops the socket, and the
session is shut down with its dispositions still queued: those deliveries are
lost and return as ready (a burst of acks settled just before a close was seen
to vanish whole). Waiting for each ``end`` first means every disposition sent
on that session has been applied before the connection goes. The wait is
bounded by the caller: a broker that never answers costs the bound, no more.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from proton import Endpoint

from ackbridge_amqp10.links import same


class SessionEnds:
    """The sessions ended locally and not yet remotely, and who waits for them."""

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self._waiters: list[tuple[list[Any], Future[None]]] = []

    def ending(self, session: Any) -> None:
        """We sent *session*'s ``end``: wait for the broker's."""
        if session.state & Endpoint.REMOTE_CLOSED or self._is_pending(session):
            return
        self._pending.append(session)

    def ended(self, session: Any) -> None:
        """The broker ended *session* (answering ours, or on its own)."""
        self._pending = [s for s in self._pending if not same(s, session)]
        self._wake()

    def clear(self) -> None:
        """The connection is gone: no answer will come, nothing is left to wait for."""
        self._pending.clear()
        self._wake()

    def wait(self, future: Future[None], sessions: list[Any] | None = None) -> None:
        """Complete *future* once *sessions* (every pending one when None) have ended."""
        waiting = [s for s in (self._pending if sessions is None else sessions) if self._is_pending(s)]
        if not waiting:
            if not future.done():
                future.set_result(None)
            return
        self._waiters.append((waiting, future))

    def _is_pending(self, session: Any) -> bool:
        return any(same(s, session) for s in self._pending)

    def _wake(self) -> None:
        still: list[tuple[list[Any], Future[None]]] = []
        for sessions, future in self._waiters:
            if future.done():
                continue
            left = [s for s in sessions if self._is_pending(s)]
            if left:
                still.append((left, future))
            else:
                future.set_result(None)
        self._waiters = still
