"""Settlement writes that cannot outlive their connection (aio-pika transport).

aiormq hands every frame to its writer task through a bounded ``asyncio.Queue``
(10 frames). When the peer goes silent without closing (a blackhole) the writer
waits in ``drain()`` behind a large write, or is gone, and the queue fills; an ack
(``basic_ack(wait=False)``) then waits in ``Queue.put`` for room. aiormq closes the
connection when its heartbeat check fires, but nothing wakes a put already
waiting: the settle hung for ever (issue 38).

So a write that cannot be queued at once waits for the first of: room (it is
queued), the end of its generation (the link saw the loss: the put is withdrawn,
nothing of it was queued), or the stall limit (aiormq did not notice: the caller
severs the link, which ends the generation). In the last two cases the ops not
queued are stale: nothing was sent for them and the broker redelivers them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from ackbridge.options import ConnectionSettings

#: aiormq presumes a peer dead after HEARTBEAT_GRACE_MULTIPLIER x (heartbeat + 1) s of silence.
AIORMQ_GRACE_MULTIPLIER = 3


def stall_limit(settings: ConnectionSettings) -> float:
    """How long a settlement may wait for room in the frame queue: twice the silence after which
    aiormq closes the connection itself, so the limit acts only where aiormq's own check did not.
    With heartbeats off (0) aiormq has no such check: connect_timeout stands in for the heartbeat."""
    beat = round(settings.heartbeat) if settings.heartbeat > 0 else settings.connect_timeout
    return 2.0 * AIORMQ_GRACE_MULTIPLIER * (beat + 1)


def has_room(wire: Any) -> bool:
    """Whether aiormq would queue a frame on *wire* without waiting (its put does not yield then)."""
    queue = getattr(wire, "write_queue", None)
    return isinstance(queue, asyncio.Queue) and not queue.full()


async def bounded(write: Coroutine[Any, Any, None], ended: asyncio.Future[str], limit: float) -> str | None:
    """Run *write* (one aiormq settlement call) until it is queued, *ended* resolves or *limit*
    seconds pass. None once it was queued (or raised: aiormq's error goes to the caller); else
    why it was withdrawn, nothing of it queued."""
    task = asyncio.ensure_future(write)
    try:
        await asyncio.wait((task, ended), timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()  # a cancelled Queue.put queues nothing
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # the caller was cancelled
        if ended.done():
            return ended.result()
        return f"no room in aiormq's frame queue for {limit:.0f} s: the connection is presumed dead"
    return None
