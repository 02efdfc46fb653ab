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

A delivery without headers (nearly every one) skips more: the client's
``_process_msg``, which the parser awaits with each message's raw fields, is
taken over once per client (:func:`take_over`); for a direct subscription's
message without headers it counts the message as nats-py does and hands the
subject, reply subject and body to the subscription's *plain* handler, with no
``Msg`` built and no header step. Everything else (other subscriptions, status
messages, messages with headers) goes to nats-py's own ``_process_msg``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger("ackbridge.nats")

Handler = Callable[[Msg], None]
#: (subject, reply subject, body) of a message without headers, as the parser read them.
PlainHandler = Callable[[bytes, bytes, bytes], None]


class DirectQueue(asyncio.Queue[Msg]):
    """Stands in for a subscription's ``_pending_queue``: it never holds a message,
    it hands each to *handler* (so, to the rest of nats-py, it is always empty)."""

    def __init__(self, sub: Subscription, handler: Handler, plain: PlainHandler) -> None:
        super().__init__()
        self._sub = sub
        self._handler = handler
        self.plain = plain

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


async def subscribe(client: Client, subject: str, handler: Handler, plain: PlainHandler, *,
                    direct: bool) -> Subscription:
    """Subscribe to *subject* on *client*: each message to *handler*, called as it is
    parsed (*direct*, the fast path: those without headers to *plain*), or from
    nats-py's subscription task (the public path)."""
    if not direct:
        async def callback(msg: Msg) -> None:
            handler(msg)

        return await client.subscribe(subject, cb=callback)
    take_over(client)
    sub = await client.subscribe(subject)
    queue = DirectQueue(sub, handler, plain)
    earlier, sub._pending_queue = sub._pending_queue, queue
    # Nothing is sent to a new inbox before the caller's first request, so this finds
    # nothing; were a message there, it is handed on in order rather than left behind.
    while not earlier.empty():
        queue.put_nowait(earlier.get_nowait())
    return sub


#: Clients whose _process_msg is taken over (a Link makes one per generation).
_TAKEN_OVER: weakref.WeakSet[Client] = weakref.WeakSet()


def take_over(client: Client) -> None:
    """Route *client*'s messages without headers for a direct subscription past nats-py's
    Msg (once per client; fastpath.py checks the parser calls ``_process_msg`` with
    these arguments)."""
    if client in _TAKEN_OVER:
        return
    _TAKEN_OVER.add(client)
    process_msg = client._process_msg
    subs = client._subs  # made once by Client.__init__; subscribe/unsubscribe change it in place
    stats = client.stats

    async def process_plain(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        sub = subs.get(sid)
        queue = sub._pending_queue if sub is not None else None
        if headers or not reply or type(queue) is not DirectQueue:
            await process_msg(sid, subject, reply, data, headers)
            return
        # Counted as Client._process_msg counts (its max_msgs and JetStream-context cases
        # never apply: a direct subscription has neither).
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        sub._received += 1  # type: ignore[union-attr]
        try:
            queue.plain(subject, reply, data)
        except Exception:
            log.exception("ackbridge-nats: handling a message of %s failed", sub.subject)  # type: ignore[union-attr]

    setattr(client, "_process_msg", process_plain)
