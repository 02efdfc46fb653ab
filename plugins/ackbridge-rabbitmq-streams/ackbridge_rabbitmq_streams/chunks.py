"""Subscriptions that hand over whole chunks, and what a chunk holds.

The broker delivers a stream by *chunk* (a batch of records written
together, first offset + record count), starting with the chunk that holds
the offset asked for: a reader that starts inside a chunk skips the records
before its start itself. One credit lets the broker send one more chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

from rstream import constants, schema
from rstream.client import Client

#: The stream protocol numbers subscriptions per connection with one byte.
MAX_SUBSCRIPTIONS = 256


class SubscriptionIds:
    """The subscription ids of one connection in use; the lowest free one is taken."""

    def __init__(self) -> None:
        self._used: set[int] = set()

    def take(self) -> int:
        for candidate in range(MAX_SUBSCRIPTIONS):
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate
        raise RuntimeError("256 subscriptions are open on one stream connection")

    def release(self, sub_id: int) -> None:
        self._used.discard(sub_id)


async def barrier(client: Client, stream: str) -> None:
    """A round trip on *client*'s connection: the broker answers it after
    every frame it sent before (it handles one connection's commands in order,
    and sends the chunks a subscribe makes available before its next answer).
    The loop then runs once more so rstream's delivery tasks have handed them on."""
    await client.stream_exists(stream)
    for _ in range(5):
        await asyncio.sleep(0)


def offset_spec(kind: str | int) -> schema.OffsetSpec:
    """``"first"``, ``"last"``, ``"next"`` or an absolute offset as the protocol's spec."""
    if isinstance(kind, int):
        return schema.OffsetSpec.from_params(constants.OffsetType.OFFSET, kind)
    return schema.OffsetSpec.from_params(constants.OffsetType[kind.upper()], None)


def records(chunk: schema.Deliver) -> Iterator[tuple[int, bytes]]:
    """(offset, encoded message) of every record of *chunk* (sub-entry batches unpacked)."""
    offset = chunk.chunk_first_offset
    for data in chunk.get_messages():
        yield offset, data
        offset += 1


def records_from(chunk: schema.Deliver, start: int) -> Iterator[tuple[int, bytes]]:
    """What :func:`records` yields from offset *start* on (the records before it skipped), built
    in C (zip over a count): a chunk holds thousands of records under load."""
    first = chunk.chunk_first_offset
    messages = chunk.get_messages()
    if start > first:
        messages = messages[start - first:]
        first = start
    return zip(itertools.count(first), messages)


def chunk_end(chunk: schema.Deliver) -> int:
    """One past the last offset of *chunk*."""
    return int(chunk.chunk_first_offset + chunk.num_records)


class ChunkSubscription:
    """One subscription on *client*: chunks arrive in :attr:`chunks` (an asyncio
    queue) until :meth:`close`. All methods run on the client's loop."""

    def __init__(self, client: Client, ids: SubscriptionIds, sub_id: int, stream: str) -> None:
        self.client = client
        self.stream = stream
        self.sub_id = sub_id
        self.chunks: asyncio.Queue[schema.Deliver] = asyncio.Queue()
        self._ids = ids
        self._closed = False

    @classmethod
    async def open(cls, client: Client, ids: SubscriptionIds, stream: str, spec: schema.OffsetSpec, *,
                   credit: int, properties: dict[str, Any] | None = None) -> ChunkSubscription:
        """Subscribe; raises rstream's errors (StreamDoesNotExist...) for the caller to map."""
        sub = cls(client, ids, ids.take(), stream)
        client.add_handler(schema.Deliver, sub._on_chunk, name=str(sub.sub_id))
        try:
            await client.run_queue_listener_task(sub.sub_id, sub._on_chunk)
            await client.subscribe(stream, sub.sub_id, spec, initial_credit=credit, properties=properties)
        except BaseException:
            await sub._forget()
            raise
        return sub

    def _on_chunk(self, chunk: schema.Deliver) -> None:
        # rstream hands every chunk of the connection to every subscription's handler.
        if chunk.subscription_id == self.sub_id and not self._closed:
            self.chunks.put_nowait(chunk)

    async def next_chunk(self, timeout: float) -> schema.Deliver | None:
        """The next chunk, or None when none came within *timeout* seconds."""
        try:
            return await asyncio.wait_for(self.chunks.get(), timeout)
        except TimeoutError:
            return None

    async def credit(self, chunks: int = 1) -> None:
        if not self._closed and self.client.is_connection_alive():
            await self.client.credit(self.sub_id, chunks)

    async def close(self) -> None:
        """Unsubscribe (when the connection still lives) and forget; never raises."""
        if self._closed:
            return
        alive = self.client.is_connection_alive()
        await self._forget()
        if alive:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.unsubscribe(self.sub_id), 5)

    async def _forget(self) -> None:
        self._closed = True
        self.client.remove_handler(schema.Deliver, name=str(self.sub_id))
        with contextlib.suppress(Exception):
            await self.client.stop_queue_listener_task(self.sub_id)
        self._ids.release(self.sub_id)


async def edge_chunk(client: Client, ids: SubscriptionIds, stream: str, which: str) -> schema.Deliver | None:
    """The first (``which="first"``) or last (``"last"``) chunk of *stream* as the
    broker holds it committed, or None when the stream holds no message.

    Without the stream-stats command (RabbitMQ 3.11+) this is how a 3.10 broker
    tells a stream's bounds: a subscription at "first"/"last" with one credit gets
    exactly that chunk at once, before the answer to the next request on the
    same connection; no chunk before that answer means an empty stream.
    """
    sub = await ChunkSubscription.open(client, ids, stream, offset_spec(which), credit=1)
    try:
        await barrier(client, stream)
        try:
            return sub.chunks.get_nowait()
        except asyncio.QueueEmpty:
            return None
    finally:
        await sub.close()
