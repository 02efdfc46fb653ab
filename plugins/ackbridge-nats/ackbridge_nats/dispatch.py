"""A subscription whose messages reach a plain function as nats-py parses them.

nats-py hands each message of a subscription with a callback to an
``asyncio.Queue`` that a task of the subscription drains, awaiting the callback
once per message. For a pull subscription that is most of nats-py's own work per
delivery, and buys nothing: the handler (:meth:`PullSubscription._on_msg
<ackbridge_nats.receiving.PullSubscription>`) never waits. On the fast path
(:mod:`ackbridge_nats.fastpath`) the subscription is made without a callback, so
no task is started, and its queue is replaced by a :class:`DirectQueue`, whose
``put_nowait`` -- what ``Client._process_msg`` calls with each parsed message --
calls the handler there and then: same order, one call. Off the fast path the
handler is wrapped in the coroutine nats-py's public ``subscribe(cb=...)`` wants.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger("ackbridge.nats")

Handler = Callable[[Msg], None]


class DirectQueue(asyncio.Queue[Msg]):
    """Stands in for a subscription's ``_pending_queue``: it never holds a message,
    it hands each to *handler* (so, to the rest of nats-py, it is always empty)."""

    def __init__(self, sub: Subscription, handler: Handler) -> None:
        super().__init__()
        self._sub = sub
        self._handler = handler

    def put_nowait(self, item: Msg) -> None:
        # nats-py counted the message's bytes as pending before this call (its task
        # takes them off when it picks a message up): handled now, they are not.
        self._sub._pending_size -= len(item.data)
        try:
            self._handler(item)
        except Exception:
            # Raised into nats-py's reader, it would end the connection over one message;
            # nats-py's own subscription task reports a callback's error and goes on, as here.
            log.exception("ackbridge-nats: handling a message of %s failed", self._sub.subject)


async def subscribe(client: Client, subject: str, handler: Handler, *, direct: bool) -> Subscription:
    """Subscribe *handler* to *subject* on *client*: called as each message is parsed
    (*direct*, the fast path), or from nats-py's subscription task (the public path)."""
    if not direct:
        async def callback(msg: Msg) -> None:
            handler(msg)

        return await client.subscribe(subject, cb=callback)
    sub = await client.subscribe(subject)
    queue = DirectQueue(sub, handler)
    earlier, sub._pending_queue = sub._pending_queue, queue
    # Nothing is sent to a new inbox before the caller's first request, so this finds
    # nothing; were a message there, it is handed on in order rather than left behind.
    while not earlier.empty():
        queue.put_nowait(earlier.get_nowait())
    return sub
