"""Small rules about proton links and sessions shared by the receive and send sides
(all called on the container thread)."""

from __future__ import annotations

from typing import Any

from proton import Endpoint


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
