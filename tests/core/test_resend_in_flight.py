"""A retry batch stays in flight while it is sent again (both faces).

The resender used to take the whole batch off the retry list before sending it.
A publish of the batch not sent yet was then neither pending nor waiting, so
when the broker answered the first resend before the next was registered,
``flush()`` saw nothing in flight and returned with confirms unresolved (the
scoreboard's NATS connection-cut row under load: 173 of 300 left unknown).
The transport here answers each resend inside ``publish``, before the next
one, and records how many publishes the publisher still counts in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

from ackbridge.aio.connection import AsyncConnection
from ackbridge.messages import CONFIRMED, ConfirmStatus, OutboundMessage, WireSettle, unknown
from ackbridge.sync.connection import Connection
from ackbridge.transport import SyncTransport
from ackbridge.urls import parse_url
from tests.core.scripted import CAPABILITIES, QuietAsyncTransport, default_options

N = 5


class Script:
    """First sends are held; a resend (a message id seen before) is confirmed at once."""

    def __init__(self) -> None:
        self.first: list[int] = []
        self.seen: set[str | None] = set()
        self.in_flight_after_answer: list[int] = []
        self.publisher: Any = None
        self.events: Any = None

    def sent(self, seq: int, message: OutboundMessage, events: Any) -> None:
        self.events = events
        if message.message_id not in self.seen:
            self.seen.add(message.message_id)
            self.first.append(seq)
            return
        events.confirm(seq, CONFIRMED)
        self.in_flight_after_answer.append(self.publisher.in_flight)


class ScriptedSync(SyncTransport):
    capabilities = CAPABILITIES
    script: ClassVar[Script]

    @property
    def generation(self) -> int:
        return 1

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        pass

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        pass

    def unsubscribe(self, subscription: str) -> None:
        pass

    def settle(self, ops: Sequence[WireSettle]) -> None:
        pass

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.script.sent(seq, message, self.events)


class ScriptedAsync(QuietAsyncTransport):
    script: ClassVar[Script]

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.script.sent(seq, message, self.events)


def test_a_batch_sent_again_counts_in_flight_until_each_is_answered() -> None:
    script = ScriptedSync.script = Script()
    conn = Connection(parse_url("scripted://test"), ScriptedSync, *default_options()).open()
    try:
        publisher = script.publisher = conn.publisher(retransmit=True, confirm_timeout=5.0)
        confirms = [publisher.publish("q", b"x") for _ in range(N)]
        for seq in list(script.first):
            script.events.confirm(seq, unknown("no answer"))
        assert publisher.flush(timeout=30)
        assert [c.outcome.status for c in confirms if c.outcome] == [ConfirmStatus.CONFIRMED] * N
        assert script.in_flight_after_answer == list(range(N - 1, -1, -1))
    finally:
        conn.close()


def test_a_batch_sent_again_counts_in_flight_until_each_is_answered_async() -> None:
    async def run() -> None:
        script = ScriptedAsync.script = Script()
        conn = AsyncConnection(parse_url("scripted://test"), ScriptedAsync, *default_options())
        await conn.open()
        try:
            publisher = script.publisher = conn.publisher(retransmit=True, confirm_timeout=5.0)
            confirms = [await publisher.publish("q", b"x") for _ in range(N)]
            for seq in list(script.first):
                script.events.confirm(seq, unknown("no answer"))
            assert await publisher.flush(timeout=30)
            assert [c.outcome.status for c in confirms if c.outcome] == [ConfirmStatus.CONFIRMED] * N
            assert script.in_flight_after_answer == list(range(N - 1, -1, -1))
        finally:
            await conn.close()

    asyncio.run(run())
