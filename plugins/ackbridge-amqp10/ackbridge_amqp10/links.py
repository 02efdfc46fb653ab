"""What the receive and send sides share: the connection's state (:class:`Wire`)
and small rules about proton links and sessions (all on the container thread)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from proton import Endpoint

from ackbridge.errors import ConnectionLostError


def session(conn: Any) -> Any:
    """Each link gets its own session: brokers end the whole session on some link
    errors (RabbitMQ 3.10: a missing queue, or a 'modified' outcome before
    3.10.11), and that must not take the other subscriptions with it."""
    found = conn.session()
    found.open()
    return found


def close_link(link: Any) -> None:
    """Close *link* and its session (one link per session), each once."""
    if not link.state & Endpoint.LOCAL_CLOSED:
        link.close()
    own = link.session
    if not own.state & Endpoint.LOCAL_CLOSED:
        own.close()


def same(a: Any, b: Any) -> bool:
    """Whether two proton wrappers name the same C object (neither None)."""
    return a is not None and b is not None and bool(a == b)


def reply_address(source: str) -> str:
    """The reply-to for an inbox attached at *source*. RabbitMQ: ``/queue/NAME`` as a
    target declares NAME again, so a reply arriving after the inbox is gone would
    re-create it; ``/amq/queue/NAME`` only routes to it (and drops the reply)."""
    if source.startswith("/queue/"):
        return "/amq/queue/" + source[len("/queue/"):]
    return source


@dataclass(eq=False)
class Wire:
    """The connection's state the transport and its parts share (container thread
    only, except reading ``live``): what the parts need of the connection, and no more."""

    what: str  # the redacted URL, for errors
    conn: Any = None
    generation: int = 0
    #: The generation whose settlements may go out; None while (re)connecting.
    live: int | None = None
    closing: bool = False
    waiters: dict[Any, Future[Any]] = field(default_factory=dict)  # link -> future completed by its attach

    def require_conn(self) -> Any:
        if self.conn is None or self.live is None:
            raise ConnectionLostError(f"{self.what}: not connected (reconnecting)")
        return self.conn
