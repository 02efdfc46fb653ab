"""Settling by ack handle where the broker binds acks to the receiving connection
(the embedded broker): a clear UnsupportedVerbError before anything is sent or
closed, on both faces."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import ackbridge
from ackbridge.capabilities import Level
from ackbridge.messages import WireVerb


def test_sync_face_refuses_handles_and_leaving(tmp_path: Path) -> None:
    url = f"local://{tmp_path}/h.db"
    with ackbridge.connect(url) as conn:
        assert conn.capabilities.connection_free_acks.level is Level.UNSUPPORTED
        conn.declare_queue("q")
        conn.publish("q", b"one").result(timeout=10)
        consumer = conn.consume("q")
        delivery = consumer.get(timeout=10)
        assert delivery is not None
        with pytest.raises(ackbridge.UnsupportedVerbError, match="connection-free acks"):
            _ = delivery.ack_handle
        with pytest.raises(ackbridge.UnsupportedVerbError, match="settle by ack handle"):
            conn.settle_handles(["anything"])
        with pytest.raises(ackbridge.UnsupportedVerbError):
            conn.close(leave_unsettled=True)
        # Refused before anything changed: the consumer and the delivery still work.
        delivery.ack()
        assert consumer.unsettled == 0


def test_async_face_refuses_handles_and_leaving(tmp_path: Path) -> None:
    async def run() -> None:
        conn = await ackbridge.connect_async(f"local://{tmp_path}/h.db")
        try:
            await conn.declare_queue("q")
            await (await conn.publish("q", b"one")).result(timeout=10)
            consumer = await conn.consume("q")
            delivery = await consumer.get(timeout=10)
            assert delivery is not None
            with pytest.raises(ackbridge.UnsupportedVerbError, match="connection-free acks"):
                _ = delivery.ack_handle
            with pytest.raises(ackbridge.UnsupportedVerbError, match="settle by ack handle"):
                await conn.settle_handles(["anything"], WireVerb.ACK)
            with pytest.raises(ackbridge.UnsupportedVerbError):
                await conn.close(leave_unsettled=True)
            await delivery.ack()
        finally:
            await conn.close()

    asyncio.run(run())
