"""BrokerHarness for NATS JetStream, answering from the server's side.

Counts come from the JetStream API on a raw nats-py connection of the
harness's own (never the client under test): the durable consumer's
``num_pending`` (ready), ``num_ack_pending`` (unacked) and
``num_redelivered``, and the streams' message counts. Clients under test go
through a :class:`~ackbridge.testing.proxy.FaultProxy`, so a cut is a TCP
reset and held confirms are PubAcks the proxy does not forward yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from ackbridge.testing.harness import ProxiedHarness
from ackbridge.testing.proxy import FaultProxy
from ackbridge_nats.naming import DEFAULT_DEAD_LETTER_SUBJECT, DEFAULT_DURABLE, dead_letter_subject, stream_name

HOST, PORT = "127.0.0.1", 4222


class RawNats:
    """A plain nats-py client on its own loop thread, for the harness's questions."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nats-harness", daemon=True)
        self.thread.start()
        self.client: Client = self.run(lambda: nats.connect(f"nats://{HOST}:{PORT}"))

    def run(self, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 30) -> Any:
        async def call() -> Any:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.client.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()  # releases its self-pipe sockets (else a ResourceWarning at GC)


class NatsHarness(ProxiedHarness):
    name = "nats-jetstream"
    kind = "nats"
    can_count_unacked = True
    can_hold_confirms = True

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:10]
        self.raw = RawNats()
        self.proxy = FaultProxy(PORT)
        self.streams: list[str] = []

    # ---- BrokerHarness -----------------------------------------------------------------
    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"nats://127.0.0.1:{self.proxy.port}" + (f"?{query}" if query else "")

    def new_queue(self, *, dead_letter: bool = True) -> str:
        subject = f"abtest.{self.run_id}.{uuid.uuid4().hex[:10]}"
        jsm = self.raw.client.jsm()
        if dead_letter:
            dlq = dead_letter_subject(DEFAULT_DEAD_LETTER_SUBJECT, subject)
            self.raw.run(lambda: jsm.add_stream(StreamConfig(name=stream_name(dlq), subjects=[dlq],
                                                             storage=StorageType.MEMORY)))
            self.streams.append(stream_name(dlq))
        stream = stream_name(subject)
        self.raw.run(lambda: jsm.add_stream(StreamConfig(
            name=stream, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.MEMORY)))
        self.streams.append(stream)
        self.raw.run(lambda: jsm.add_consumer(stream, ConsumerConfig(
            durable_name=DEFAULT_DURABLE, ack_policy=AckPolicy.EXPLICIT, filter_subject=subject)))
        return subject

    def unroutable_target(self) -> str | None:
        return f"abtest.{self.run_id}.nostream.{uuid.uuid4().hex[:6]}"

    def consumer_info(self, queue: str) -> Any:
        return self.raw.run(lambda: self.raw.client.jsm().consumer_info(stream_name(queue), DEFAULT_DURABLE))

    def ready(self, queue: str) -> int:
        return int(self.consumer_info(queue).num_pending or 0)

    def unacked(self, queue: str) -> int:
        return int(self.consumer_info(queue).num_ack_pending or 0)

    def redelivered(self, queue: str) -> int:
        return int(self.consumer_info(queue).num_redelivered or 0)

    def stream_messages(self, subject: str) -> int:
        info = self.raw.run(lambda: self.raw.client.jsm().stream_info(stream_name(subject)))
        return int(info.state.messages)

    def dead_lettered(self, queue: str) -> list[bytes]:
        return [m.data or b"" for m in self.dead_letter_messages(queue)]

    def dead_letter_messages(self, queue: str) -> list[Any]:
        stream = stream_name(dead_letter_subject(DEFAULT_DEAD_LETTER_SUBJECT, queue))
        jsm = self.raw.client.jsm()
        try:
            state = self.raw.run(lambda: jsm.stream_info(stream)).state
        except NotFoundError:
            return []
        if not state.messages:
            return []
        return [self.raw.run(lambda seq=seq: jsm.get_msg(stream, seq))
                for seq in range(state.first_seq, state.last_seq + 1)]

    def cleanup(self) -> None:
        self.proxy.close()
        jsm = self.raw.client.jsm()
        for stream in self.streams:
            with contextlib.suppress(Exception):
                self.raw.run(lambda stream=stream: jsm.delete_stream(stream))
        self.raw.close()
