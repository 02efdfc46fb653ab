"""A pull request the server dropped without a status does not starve the subscription.

nats-server before 2.9.15 (this machine runs 2.9.10) can remove an expired pull
request while trying to deliver to it, without the 408 that hands its credit back
(nats-server#3942). The subscription then counts credit nobody serves and never asks
again: under load in CI, a consumer received nothing for 15 s. Here the dropped
request is credit the server never heard of; the message published after the real
request expired must still arrive, through the watchdog.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from ackbridge.messages import InboundMessage
from ackbridge_nats.receiving import PullSubscription
from tests.nats.harness import HOST, PORT


def test_credit_of_a_silently_dropped_request_is_asked_for_again(caplog: pytest.LogCaptureFixture) -> None:
    run = uuid.uuid4().hex[:10]
    stream, subject, durable = f"ABWATCH_{run}", f"abwatch.{run}", "watchdog"
    got: list[InboundMessage] = []

    async def scenario() -> None:
        client = await nats.connect(f"nats://{HOST}:{PORT}")
        js = client.jetstream()
        await js.add_stream(StreamConfig(name=stream, subjects=[subject]))
        try:
            await js.add_consumer(stream, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
            sub = PullSubscription("s1", subject, stream, durable, 4, 0.5, lambda _name, m: got.append(m))
            await sub.start(client, 1)
            sub.requested += 4  # a request the server dropped without a 408
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while sub.requested != 4 and loop.time() < deadline:  # the real request's 408 arrives
                await asyncio.sleep(0.05)
            assert sub.requested == 4, "the real request never ended: only the phantom should be counted"
            await js.publish(subject, b"after the drop")
            deadline = loop.time() + 15
            while not got and loop.time() < deadline:
                await asyncio.sleep(0.05)
            await sub.stop(wait=False)
        finally:
            await js.delete_stream(stream)
            await client.close()

    with caplog.at_level(logging.DEBUG, logger="ackbridge.nats"):
        asyncio.run(scenario())
    assert [m.body for m in got] == [b"after the drop"]
    assert any("dropped the pull request" in r.getMessage() for r in caplog.records)
