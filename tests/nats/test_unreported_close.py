"""A client nats-py closed without telling anyone is noticed and replaced.

nats-py 2.15 closes a client after a loss by first flushing what is buffered; on a
reset socket that flush raises inside ``Client._close`` before the closed callback
runs (docs/broker-quirks.md). A private nats-server SIGKILLed while 150 publishes were
buffered left the link on that closed client for good: no loss reported, no
reconnect, every publish pending until the window was full (the publisher rows' NATS
restart cell, about 1 run in 10 under load). Here the client is closed the way nats-py
leaves it then (a real ``Client._close`` with ``do_cbs=False``: no callback), on the
shared server: the link must report the loss, reconnect and confirm again.
"""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats


def test_a_close_without_its_callback_ends_the_generation_and_the_link_reconnects() -> None:
    harness = NatsHarness()
    queue = harness.new_queue()
    conn = ackbridge.connect(harness.url(), reconnect_max_delay=0.5)
    try:
        publisher = conn.publisher()
        assert publisher.publish(queue, b"before").result(timeout=30).status is ConfirmStatus.CONFIRMED
        transport = transport_of(conn)
        link = transport.inner.link
        before = transport.generation
        silent = link.client

        async def close_silently() -> None:
            await silent._close(Client.CLOSED, do_cbs=False)  # what the failed flush leaves

        asyncio.run_coroutine_threadsafe(close_silently(), transport.loop).result(10)
        assert silent.is_closed
        eventually(lambda: transport.generation > before, timeout=10, message="the loss is reported")
        eventually(lambda: link.live, timeout=30, message="the link reconnected on a new client")
        assert link.client is not silent
        assert publisher.publish(queue, b"after").result(timeout=30).status is ConfirmStatus.CONFIRMED
        # What the server holds: both, each once.
        eventually(lambda: harness.ready(queue) == 2, timeout=10, message=f"{queue} holds both publishes")
    finally:
        conn.close()
        harness.cleanup()
