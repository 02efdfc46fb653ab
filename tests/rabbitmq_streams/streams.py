"""Test helper: unique streams on the broker, filled chunk by chunk, read back raw.

It talks to RabbitMQ with rstream directly (not through the plugin under test), so
what it reports is what the broker holds.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from rstream import constants, schema
from rstream import exceptions as rx
from rstream.client import Client

from ackbridge.messages import OutboundMessage
from ackbridge.transport.loop_thread import LoopThread
from ackbridge_rabbitmq_streams import codec

URL = "rabbitmq-stream://guest:guest@127.0.0.1:5552/"
_PUBLISHER = 1


class StreamAdmin:
    """Unique streams (deleted on exit) and a publisher that waits for each batch's
    confirms before the next one, so each batch becomes one chunk of its own."""

    def __init__(self) -> None:
        self._loop = LoopThread("test-stream-admin")
        self._client: Client = self._loop.run(self._open(), 15)
        self.created: list[str] = []
        self._next_id = 0

    @staticmethod
    async def _open() -> Client:
        client = Client("127.0.0.1", 5552, frame_max=1024 * 1024, heartbeat=60)
        await client.start()
        await client.authenticate("/", "guest", "guest")
        return client

    def __enter__(self) -> StreamAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.created:
            self.delete(name)
        self._loop.run(self._client.close(), 15)
        self._loop.stop()

    def new_stream(self, prefix: str = "ab-test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self._loop.run(self._client.create_stream(name), 15)
        self.created.append(name)
        return name

    def name_only(self, prefix: str = "ab-test") -> str:
        """A unique name the test will create through the plugin (deleted on exit all the same)."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.created.append(name)
        return name

    def delete(self, name: str) -> None:
        try:
            self._loop.run(self._client.delete_stream(name), 15)
        except rx.StreamDoesNotExist:
            pass

    def exists(self, name: str) -> bool:
        return bool(self._loop.run(self._client.stream_exists(name), 15))

    def publish_batches(self, stream: str, sizes: list[int], **fields: Any) -> list[bytes]:
        """Publish len(sizes) batches (bodies b"m0", b"m1", ...), each confirmed before the next."""
        return self._loop.run(self._publish(stream, sizes, fields), 60)

    async def _publish(self, stream: str, sizes: list[int], fields: dict[str, Any]) -> list[bytes]:
        client = self._client
        confirmed: asyncio.Queue[list[int]] = asyncio.Queue()
        name = f"confirm-{stream}"
        client.add_handler(schema.PublishConfirm, lambda frame: confirmed.put_nowait(frame.publishing_ids),
                           name=name)
        await client.declare_publisher(stream, None, _PUBLISHER)
        bodies: list[bytes] = []
        try:
            for size in sizes:
                batch = []
                for _ in range(size):
                    body = f"m{len(bodies)}".encode()
                    bodies.append(body)
                    self._next_id += 1
                    data = codec.encode_public(OutboundMessage(body=body, **fields))
                    batch.append(schema.Message(publishing_id=self._next_id, filter_value=None, data=data))
                await client.publish(batch, _PUBLISHER)
                pending = size
                while pending:
                    pending -= len(await asyncio.wait_for(confirmed.get(), 10))
        finally:
            client.remove_handler(schema.PublishConfirm, name=name)
            await client.delete_publisher(_PUBLISHER)
        return bodies

    def broker_offset(self, stream: str, reference: str) -> int | None:
        """The offset the broker holds for *reference* (the last one processed), None if none."""
        try:
            return int(self._loop.run(self._client.query_offset(stream, reference), 15))
        except rx.OffsetNotFound:
            return None

    def records(self, stream: str) -> list[tuple[int, bytes]]:
        """Every committed record of *stream*: (offset, encoded message)."""
        return self._loop.run(self._records(stream), 30)

    async def _records(self, stream: str) -> list[tuple[int, bytes]]:
        client = self._client
        chunks: list[schema.Deliver] = []
        sub_id = 200

        def on_chunk(frame: schema.Deliver) -> None:
            if frame.subscription_id == sub_id:
                chunks.append(frame)

        client.add_handler(schema.Deliver, on_chunk, name=str(sub_id))
        await client.run_queue_listener_task(sub_id, on_chunk)
        try:
            await client.subscribe(stream, sub_id, schema.OffsetSpec(constants.OffsetType.FIRST), initial_credit=10000)
            # The broker sends what it holds (up to the credit) before it answers the next request.
            await client.stream_exists(stream)
            for _ in range(5):
                await asyncio.sleep(0)
            await client.unsubscribe(sub_id)
        finally:
            client.remove_handler(schema.Deliver, name=str(sub_id))
            await client.stop_queue_listener_task(sub_id)
        found = []
        for chunk in chunks:
            offset = chunk.chunk_first_offset
            for data in chunk.get_messages():
                found.append((offset, data))
                offset += 1
        return found

    def store_raw(self, stream: str, reference: str, offset: int) -> None:
        self._loop.run(self._client.store_offset(stream, reference, offset), 15)
        self._loop.run(self._client.stream_exists(stream), 15)
