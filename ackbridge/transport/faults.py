"""The declared fault seam: cut a connection, hold its writes or its publishes.

Tests, the scoreboard and the Spark connector's fault options inject faults
through this module instead of reaching into a connection's private parts
(``ackbridge.testing.faults`` re-exports it for tests)::

    from ackbridge.transport.faults import faults

    seam = faults(conn)              # Connection or AsyncConnection
    seam.sever("test cut")           # the generation ends, as on a network fault
    with seam.writes_held():         # settlements and publishes stay client-side
        ...

A transport offers the faults it can (``sever``, ``hold_writes``,
``hold_publishes`` on :class:`~ackbridge.transport.TransportBase`); one it
cannot raises NotImplementedError naming the transport.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ackbridge.transport import ThreadedAsyncTransport, TransportBase


def transport_of(connection: Any) -> TransportBase:
    """The transport under *connection* (the sync one under the core's thread hand-off).

    For a plugin's own tests to read facts only its transport knows (a
    connection name the broker shows, the embedded broker's store)."""
    found: TransportBase | None = getattr(connection, "_transport", None)
    if found is None:
        raise TypeError(f"{type(connection).__name__} is not an ackbridge connection")
    if isinstance(found, ThreadedAsyncTransport):
        return found.sync
    return found


class FaultSeam:
    """Faults for one connection."""

    def __init__(self, connection: Any) -> None:
        self.transport = transport_of(connection)

    @property
    def generation(self) -> int:
        """The transport's current generation (rises on every reconnect)."""
        return self.transport.generation

    def sever(self, reason: str = "fault seam cut the connection") -> None:
        self.transport.sever(reason)

    def hold_writes(self, hold: bool) -> None:
        self.transport.hold_writes(hold)

    def hold_publishes(self, hold: bool) -> None:
        self.transport.hold_publishes(hold)

    def writes_held(self) -> contextlib.AbstractContextManager[None]:
        """Settlements and publishes stay client-side inside the block."""
        return _held(self.hold_writes)

    def publishes_held(self) -> contextlib.AbstractContextManager[None]:
        """Publishes queue without being sent inside the block."""
        return _held(self.hold_publishes)


@contextlib.contextmanager
def _held(hold: Callable[[bool], None]) -> Iterator[None]:
    hold(True)
    try:
        yield
    finally:
        hold(False)


def faults(connection: Any) -> FaultSeam:
    """The fault seam of *connection* (Connection or AsyncConnection)."""
    return FaultSeam(connection)
