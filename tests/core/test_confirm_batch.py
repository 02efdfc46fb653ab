"""``TransportEvents.confirm_batch``: many answers in one event (both faces).

A group commit or a broker's ``multiple`` ack answers many publishes at once.
The batch may mix publishers, hold sequence numbers nobody waits for, and carry
an unknown outcome for a retransmitting publisher: each publish must end as if
it had been confirmed on its own, and a thread waiting in flush() must wake.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ackbridge.aio.connection import AsyncConnection
from ackbridge.messages import CONFIRMED, ConfirmStatus, OutboundMessage, refused, unknown
from ackbridge.sync.connection import Connection
from ackbridge.urls import parse_url
from tests.core.scripted import default_options
from tests.core.test_resend_in_flight import ScriptedAsync, ScriptedSync


class HoldFirstSends:
    """Every first send is held for the test to answer; a resend is confirmed at once."""

    def __init__(self) -> None:
        self.first: list[int] = []
        self.seen: set[str | None] = set()
        self.events: Any = None

    def sent(self, seq: int, message: OutboundMessage, events: Any) -> None:
        self.events = events
        if message.message_id in self.seen:
            events.confirm_batch([(seq, CONFIRMED)])
            return
        self.seen.add(message.message_id)
        self.first.append(seq)


def _mixed_answers(first: list[int]) -> list[tuple[int, Any]]:
    # The publishes alternate between publisher a and b (retransmit=True): a, b, a, b...
    # One batch answers them all, with a seq nobody sent; b's first is refused, b's
    # second has an unknown outcome.
    answers: list[tuple[int, Any]] = [(10_000, CONFIRMED)]
    for index, seq in enumerate(first):
        if index == 1:
            answers.append((seq, refused("full")))
        elif index == 3:
            answers.append((seq, unknown("no answer")))  # b's: sent again, then confirmed
        else:
            answers.append((seq, CONFIRMED))
    return answers


def test_one_batch_resolves_every_publisher_and_wakes_flush() -> None:
    script = ScriptedSync.script = HoldFirstSends()  # type: ignore[assignment]
    conn = Connection(parse_url("scripted://test"), ScriptedSync, *default_options()).open()
    try:
        a, b = conn.publisher(), conn.publisher(retransmit=True, confirm_timeout=5.0)
        called: list[Any] = []
        confirms = []
        for i in range(4):
            confirms.append(a.publish("q", b"x", message_id=f"a{i}"))
            confirms.append(b.publish("q", b"x", message_id=f"b{i}"))
        confirms[0].add_done_callback(called.append)
        flushed: list[bool] = []
        waiter = threading.Thread(target=lambda: flushed.append(a.flush(timeout=30) and b.flush(timeout=30)))
        waiter.start()
        script.events.confirm_batch(_mixed_answers(script.first))
        waiter.join(30)
        assert flushed == [True]
        statuses = [c.outcome.status for c in confirms]
        assert statuses == [ConfirmStatus.CONFIRMED, ConfirmStatus.REFUSED] + [ConfirmStatus.CONFIRMED] * 6
        assert confirms[3].outcome.attempts == 2  # b's unknown one, sent again
        assert called == [confirms[0]]
        assert a.in_flight == b.in_flight == 0
    finally:
        conn.close()


def test_one_batch_resolves_every_publisher_async() -> None:
    async def run() -> None:
        script = ScriptedAsync.script = HoldFirstSends()  # type: ignore[assignment]
        conn = AsyncConnection(parse_url("scripted://test"), ScriptedAsync, *default_options())
        await conn.open()
        try:
            a, b = conn.publisher(), conn.publisher(retransmit=True, confirm_timeout=5.0)
            confirms = []
            for i in range(4):
                confirms.append(await a.publish("q", b"x", message_id=f"a{i}"))
                confirms.append(await b.publish("q", b"x", message_id=f"b{i}"))
            flushing = asyncio.ensure_future(asyncio.gather(a.flush(timeout=30), b.flush(timeout=30)))
            await asyncio.sleep(0)
            # From another thread, as a transport's I/O thread reports it.
            answers = _mixed_answers(script.first)
            await asyncio.to_thread(script.events.confirm_batch, answers)
            assert await flushing == [True, True]
            statuses = [(await c).status for c in confirms]
            assert statuses == [ConfirmStatus.CONFIRMED, ConfirmStatus.REFUSED] + [ConfirmStatus.CONFIRMED] * 6
            assert confirms[3].outcome is not None and confirms[3].outcome.attempts == 2
        finally:
            await conn.close()

    asyncio.run(run())
