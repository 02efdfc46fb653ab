"""Publishing: a publisher per stream, publishing ids, confirms, in call order.

The stream protocol confirms each publishing id (PublishConfirm) or refuses
it with a response code (PublishError); a publisher must be declared on its
stream first, and declaring one on a missing stream is refused, which is
reported as the publish's refusal. Sending is never waited for by the caller
(the first publish to a stream declares a publisher, a round trip): one sender
task sends in call order, so publishing ids rise in that order; what is queued
for one stream by the time it runs leaves in one Publish frame (up to the
frame size), as rstream's own producer batches. With ``publisher_name`` the
publisher is named: the broker drops any publishing id at or below the highest it stored
for that name (confirming it without storing it again), and numbering goes
on from that highest id (QueryPublisherSequence) on every new connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from rstream import exceptions as rx
from rstream import schema
from rstream.client import Client

from ackbridge.errors import ConnectionLostError
from ackbridge.messages import CONFIRMED, ConfirmOutcome, ConfirmStatus, OutboundMessage, refused, unknown, unsent
from ackbridge_rabbitmq_streams import codec
from ackbridge_rabbitmq_streams.errors import describe
from ackbridge_rabbitmq_streams.naming import check_name

log = logging.getLogger("ackbridge.rabbitmq_streams")

#: Room a Publish frame needs besides its records (size, command, version, publisher id, count).
_FRAME_OVERHEAD = 64
#: Room each record of a Publish frame needs besides its data (publishing id, length).
_RECORD_OVERHEAD = 12
_HANDLER = "ackbridge-publishes"
_MAX_PUBLISHERS = 256

T = TypeVar("T")


def _code_name(code: int) -> str:
    return rx.ServerError.from_code(code).__name__ if code else "error"


def prepare(destination: str, message: OutboundMessage, *, fast: bool) -> tuple[str, bytes, str | None]:
    """What a publish sends: the stream, the encoded record and the message id (raises
    InvalidOptionError, on the caller's thread, for what a stream cannot carry)."""
    check_name(destination, "stream name")
    return destination, codec.encode(message, fast=fast), message.message_id


class StreamPublishers:
    """Publisher ids, publishing ids and pending confirms of one connection (generation);
    *spawn* runs the sender task (kept by the transport until done)."""

    def __init__(self, confirm: Callable[[int, ConfirmOutcome], None],
                 confirm_batch: Callable[[Sequence[tuple[int, ConfirmOutcome]]], None], name: str | None,
                 frame_max: int, spawn: Callable[[Coroutine[Any, Any, None]], None], *, fast: bool) -> None:
        self._confirm = confirm
        #: A PublishConfirm frame answers many publishes: one call for them all (on the sync face
        #: one lock round trip and one wake-up, not one per publish).
        self._confirm_batch = confirm_batch
        #: Send frames as rstream's Producer does (fastpath.py), else through Client.publish.
        self.fast = fast
        self._spawn = spawn
        self._outbox: collections.deque[tuple[int, str, bytes, str | None]] = collections.deque()
        self._sending = False
        self.name = name
        self.frame_max = frame_max
        self.client: Client | None = None
        self._by_stream: dict[str, int] = {}
        self._next_id: dict[int, int] = {}
        #: publisher id -> publishing id -> (seq, stream, message id) of each publish sent and not
        #: answered (by publisher first: no key tuple to build per publish and per confirm).
        self._pending: dict[int, dict[int, tuple[int, str, str | None]]] = {}
        #: Named publisher only: (stream, message id) -> publishing id of a publish whose
        #: outcome a lost connection left unknown.
        self._unresolved: dict[tuple[str, str], int] = {}
        #: The highest publishing id the broker had stored per stream when this connection declared it.
        self._stored: dict[str, int] = {}
        #: Done when this connection is lost: ends a round trip waiting on it.
        self._gone: asyncio.Future[None] | None = None

    def start(self, client: Client) -> None:
        self.client = client
        self._by_stream.clear()
        self._next_id.clear()
        self._gone = asyncio.get_running_loop().create_future()
        client.add_handler(schema.PublishConfirm, self._on_confirm, name=_HANDLER)
        client.add_handler(schema.PublishError, self._on_error, name=_HANDLER)

    @property
    def pending(self) -> int:
        return sum(len(by_id) for by_id in self._pending.values())

    async def _publisher(self, client: Client, stream: str) -> int:
        found = self._by_stream.get(stream)
        if found is not None:
            return found
        if len(self._by_stream) >= _MAX_PUBLISHERS:
            raise rx.MaxPublishersPerInstance("256 streams published to on one connection")
        used = set(self._by_stream.values())
        publisher_id = next(i for i in range(_MAX_PUBLISHERS) if i not in used)
        await self._until_lost(client.declare_publisher(stream, self.name, publisher_id))
        last = await self._until_lost(client.query_publisher_sequence(stream, self.name)) if self.name else 0
        if self.client is not client:
            raise ConnectionLostError("the connection was lost while its publisher was declared")
        self._by_stream[stream] = publisher_id
        self._stored[stream] = int(last)
        self._next_id[publisher_id] = int(last) + 1
        return publisher_id

    async def _until_lost(self, step: Awaitable[T]) -> T:
        """*step*, a round trip on this connection, given up when the connection is lost:
        rstream leaves a request on a closed connection waiting for its own timeout
        (10 s), and every publish queued behind it would wait as long."""
        gone = self._gone
        task = asyncio.ensure_future(step)
        if gone is None:
            return await task
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            raise ConnectionLostError("the connection was lost before the broker answered")
        return task.result()

    def send(self, seq: int, stream: str, data: bytes, message_id: str | None) -> None:
        """Queue for the sender task: sent in call order, never waited for here."""
        self._outbox.append((seq, stream, data, message_id))
        if not self._sending:
            self._sending = True
            self._spawn(self._send_outbox())

    async def _send_outbox(self) -> None:
        try:
            while self._outbox:
                await self._send_run()
        finally:
            self._sending = False

    async def _send_run(self) -> None:
        """Send the head of the outbox and every publish to the same stream queued right behind
        it, in one Publish frame up to the frame size (a frame per message cost a socket write
        each): publishing ids in call order, as one by one."""
        seq, stream, data, message_id = self._outbox.popleft()
        client = self.client
        if client is None or not client.is_connection_alive():
            self._confirm(seq, unsent("not sent: the connection is down"))
            return
        if self._too_big(seq, data):
            return
        try:
            publisher_id = await self._publisher(client, stream)
        except rx.ServerError as exc:
            self._confirm(seq, refused(f"cannot publish to stream {stream!r}: the broker answered "
                                       f"{type(exc).__name__}"))
            return
        except Exception as exc:
            self._confirm(seq, unsent(f"not sent: {describe(exc)}"))
            return
        batch: list[schema.Message] = []
        pending = self._pending.setdefault(publisher_id, {})
        room = self.frame_max - _FRAME_OVERHEAD
        self._number(batch, pending, publisher_id, seq, stream, data, message_id)
        room -= len(data) + _RECORD_OVERHEAD
        outbox = self._outbox
        # The publisher's declaration above may have let the connection go: then nothing more joins.
        while outbox and outbox[0][1] == stream and self.client is client:
            seq, _, data, message_id = outbox[0]
            size = len(data) + _RECORD_OVERHEAD
            if size > room:
                if not self._too_big(seq, data):
                    break  # the next frame takes it
                outbox.popleft()  # refused: no frame can carry it
                continue
            outbox.popleft()
            self._number(batch, pending, publisher_id, seq, stream, data, message_id)
            room -= size
        if not batch:
            return
        if self.fast:
            # What rstream's Producer sends with: Client.publish goes through the generic
            # frame encoder, field by field (about a tenth of a publish's CPU).
            await client.send_publish_frame(schema.Publish(publisher_id=publisher_id, messages=batch))
        else:
            await client.publish(batch, publisher_id)

    def _too_big(self, seq: int, data: bytes) -> bool:
        """Refuse a record no frame can carry (True), before anything is sent."""
        if len(data) + _FRAME_OVERHEAD <= self.frame_max:
            return False
        self._confirm(seq, refused(f"the record is {len(data)} bytes, above the connection's frame size "
                                   f"({self.frame_max}); not sent"))
        return True

    def _number(self, batch: list[schema.Message], pending: dict[int, tuple[int, str, str | None]],
                publisher_id: int, seq: int, stream: str, data: bytes, message_id: str | None) -> None:
        """Give the publish the publisher's next publishing id and add it to *batch*, unless it is
        the retransmit of one the broker already stored (confirmed here, not sent)."""
        earlier = self._unresolved.pop((stream, message_id), None) if message_id is not None else None
        if earlier is not None and earlier <= self._stored[stream]:
            # A retransmit of a publish the broker stored before the connection was lost: its
            # named publisher's sequence has passed that publishing id, so it is not sent again.
            self._confirm(seq, ConfirmOutcome(ConfirmStatus.CONFIRMED, f"duplicate: publishing id {earlier} of "
                                              f"publisher {self.name!r} was stored before the connection was lost"))
            return
        publishing_id = self._next_id[publisher_id]
        self._next_id[publisher_id] = publishing_id + 1
        pending[publishing_id] = (seq, stream, message_id)
        # Positional (publishing_id, filter_value, data): keywords cost about twice as much.
        batch.append(schema.Message(publishing_id, None, data))

    def _on_confirm(self, frame: schema.PublishConfirm) -> None:
        pending = self._pending.get(frame.publisher_id)
        if pending is None:
            return
        outcomes = []
        for publishing_id in frame.publishing_ids:
            found = pending.pop(publishing_id, None)
            if found is not None:
                outcomes.append((found[0], CONFIRMED))
        if outcomes:
            self._confirm_batch(outcomes)

    def _on_error(self, frame: schema.PublishError) -> None:
        pending = self._pending.get(frame.publisher_id)
        if pending is None:
            return
        outcomes = []
        for error in frame.errors:
            found = pending.pop(error.publishing_id, None)
            if found is not None:
                outcomes.append((found[0], refused(f"the broker refused it ({_code_name(error.response_code)}, "
                                                   f"code {error.response_code})")))
        if outcomes:
            self._confirm_batch(outcomes)

    def lost(self, reason: str) -> None:
        """The connection went: every pending publish is unknown (stored or not, nobody can say
        yet). A named publisher remembers their publishing ids by message id: a retransmit
        of one the broker turns out to hold (its sequence passed it) is confirmed unsent."""
        pending, self._pending = self._pending, {}
        self._by_stream.clear()
        self.client = None
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)
        for by_id in pending.values():
            for publishing_id, (seq, stream, message_id) in by_id.items():
                if self.name is not None and message_id is not None:
                    self._unresolved[(stream, message_id)] = publishing_id
                self._confirm(seq, unknown(f"{reason}; no confirm arrived before the connection was lost"))

    async def close(self, client: Client) -> None:
        for publisher_id in list(self._by_stream.values()):
            try:
                await client.delete_publisher(publisher_id)
            except Exception as exc:
                log.debug("ackbridge-rabbitmq-streams: delete publisher: %s", describe(exc))
        self._by_stream.clear()
        client.remove_handler(schema.PublishConfirm, name=_HANDLER)
        client.remove_handler(schema.PublishError, name=_HANDLER)
