"""Settlements on the wire: each is a publish of ``+ACK`` or ``-NAK`` to a
delivery's reply subject, which the server answers with nothing.

``Client.publish`` checks the client's state, formats one PUB command, counts
it and looks at the flusher's queue, every time; for a run of settlements
decided together that is most of the cost of sending them. On the fast path
(:mod:`ackbridge_nats.fastpath`) the run's PUB commands are appended to the
client's output buffer as ``Client._send_command`` appends them, counted in its
``stats`` as ``_send_publish`` counts them, and the flusher is kicked once, the
way ``_send_publish`` kicks it: the bytes on the wire are those of the public
path, one fewer space (``PUB <subject> <size>``, no empty reply field).
"""

from __future__ import annotations

from collections.abc import Sequence

from nats.aio.client import Client

#: (subject, body) of each publish, in order.
Publishes = Sequence[tuple[str, bytes]]


async def publish_all(client: Client, publishes: Publishes, *, direct: bool) -> None:
    """Publish each (subject, body) of *publishes* on *client*, in order.

    The caller made sure *client* was connected; should it not be any more, the
    public path raises what nats-py raises."""
    if not direct or not client.is_connected:
        for subject, body in publishes:
            await client.publish(subject, body)
        return
    pending = client._pending
    size = payload = 0
    for subject, body in publishes:
        command = b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(body), body)
        pending.append(command)
        size += len(command)
        payload += len(body)
    client._pending_data_size += size
    stats = client.stats
    stats["out_msgs"] += len(publishes)
    stats["out_bytes"] += payload
    if client._max_pending_size > 0 and client._pending_data_size > client._max_pending_size:
        await client._flush_pending(force_flush=True)
    flush_queue = client._flush_queue
    if flush_queue is not None and flush_queue.empty():
        await client._flush_pending()
