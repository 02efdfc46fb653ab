"""The consumer-role workload on ``ackbridge.connect_async``: the asyncio twin of
:class:`tests.scoreboard.workload.Cell`.

Same phases, same ids, same fault points, same :class:`~tests.scoreboard.checker.History`
(so LOST / UNEXPECTED are counted by the same checker); only the I/O is awaited. It
reuses the sync cell's URL/proxy choice, its SIGKILLed consumer (a separate process,
run in a worker thread so the loop keeps going) and its dead-letter read.

A RabbitMQ cut is made broker-side (``rabbitmqctl close_connection``) in a worker
thread, and the loop then waits for the transport's generation to rise: the sync
harness's ``break_connection`` polls that in a blocking loop, which on the aio-pika
transport (I/O on this very loop) would never see it rise.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import ackbridge
from ackbridge.aio.connection import AsyncConnection
from ackbridge.errors import AckbridgeError, StaleDeliveryError
from ackbridge.testing.faults import transport_of
from tests.scoreboard.async_brokers import transport_kind
from tests.scoreboard.checker import History
from tests.scoreboard.workload import Cell

#: Polls of the transport's generation after a cut (50 ms apart): a count, not a wall-clock bound.
CUT_SEEN_POLLS = 600


async def break_connection(conn: AsyncConnection) -> None:
    """Close *conn*'s broker connection from the broker side, and return once the client saw it."""
    from tests.rabbitmq.harness import close_connection

    transport = transport_of(conn)
    before = transport.generation
    await asyncio.to_thread(close_connection, transport.connection_name)  # type: ignore[attr-defined]
    for _ in range(CUT_SEEN_POLLS):
        if transport.generation > before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the client did not see the cut")


class AsyncCell(Cell):
    """One scoreboard cell driven through ``connect_async`` (the harness's options plus *options*,
    e.g. ``asyncio_transport``)."""

    #: The asyncio transports its connections ran on (a row must run on the one it names).
    transports: set[str]

    async def aconnect(self) -> AsyncConnection:
        conn = await ackbridge.connect_async(self.url(), **self.options)
        self.transports.add(transport_kind(conn))
        return conn

    def run(self) -> History:
        self.transports = set()
        started = time.monotonic()
        try:
            asyncio.run(self._run())
        finally:
            if self.proxy is not None:
                self.proxy.close()
        self.history.elapsed_s = time.monotonic() - started
        self._read_dead_letters()
        return self.history

    async def _run(self) -> None:
        if self.online_consumer:
            raise NotImplementedError("the asyncio cells run on RabbitMQ: publish, then consume")
        await self._apublish()
        self._published.set()
        await self._aconsume()

    async def _apublish(self) -> None:
        h = self.history
        ids = [f"{uuid.uuid4().hex[:8]}-{i}" for i in range(self.n)]
        if self.fault == "poison":
            ids.append(f"poison-{uuid.uuid4().hex[:8]}")
            h.expected_dead.add(ids[-1])
        pending = list(ids)
        while pending and time.monotonic() < self.deadline:
            confirms: list[Any] = []
            conn: AsyncConnection | None = None
            try:
                conn = await self.aconnect()
                publisher = conn.publisher(window=200)
                for message_id in pending:
                    h.attempted.add(message_id)
                    confirms.append(await publisher.publish(self.harness.publish_target(self.queue),
                                                            message_id.encode(), message_id=message_id))
                    if self.fault == "connection-cut" and len(confirms) == len(pending) // 2 and not self._cut_publish:
                        self._cut_publish = True
                        await break_connection(conn)
                        h.injections += 1
                await publisher.flush(timeout=60)
            except AckbridgeError:
                pass  # outcomes below say what happened to each
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except AckbridgeError:
                        pass
            for confirm in confirms:
                outcome = confirm.outcome
                if outcome is None:
                    h.indeterminate.add(str(confirm.message_id))
                else:
                    h.outcome(str(confirm.message_id), outcome.status)
            # Retry what was not confirmed (at-least-once producer): duplicates are allowed.
            pending = [m for m in pending if m not in h.confirmed]

    async def _aconsume(self) -> None:
        h = self.history
        if self.fault == "consumer-sigkill":
            await asyncio.to_thread(self._sigkilled_consumer)
        injected_at = max(1, self.n // 3)
        fault_end: float | None = None
        idle_rounds = 0
        while time.monotonic() < self.deadline:
            conn: AsyncConnection | None = None
            try:
                conn = await self.aconnect()
                consumer = await conn.consume(self.queue, prefetch=50,
                                              max_deliveries=3 if self.fault == "poison" else None)
                while time.monotonic() < self.deadline:
                    delivery = await consumer.get(timeout=3.0)
                    if delivery is None:
                        break  # publishing is over before consuming starts
                    message_id = delivery.message_id or delivery.body.decode()
                    if message_id.startswith("poison-"):
                        await delivery.requeue()  # the application keeps failing on it
                        continue
                    h.delivered[message_id] += 1
                    if fault_end is not None and h.recovery_s is None:
                        h.recovery_s = time.monotonic() - fault_end
                    if sum(h.delivered.values()) >= injected_at and not self._cut_consume:
                        self._cut_consume = True
                        fault_end = await self._ainject(conn)
                    try:
                        await delivery.ack()
                    except StaleDeliveryError:
                        h.stale_refused += 1
                    if self.fault != "poison" and self._all_delivered():
                        break
            except AckbridgeError:
                pass  # reconnect below; unsettled deliveries come back from the broker
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except AckbridgeError:
                        pass
            if set(h.delivered) >= h.confirmed - h.expected_dead:
                idle_rounds += 1
                if idle_rounds >= 2 or self.fault != "poison":
                    return

    async def _ainject(self, conn: AsyncConnection) -> float | None:
        if self.fault == "connection-cut":
            await break_connection(conn)
        elif self.fault == "tcp-reset" and self.proxy is not None:
            self.proxy.reset()
        elif self.fault == "blackhole" and self.proxy is not None:
            with self.proxy.blackholed():
                await asyncio.sleep(2.0)  # the fault's duration, not a wait for state
            self.proxy.reset()
        elif self.fault == "cut-mid-frame" and self.proxy is not None:
            self.proxy.cut_mid_frame(after_bytes=3)
        else:
            return None
        self.history.injections += 1
        return time.monotonic()
