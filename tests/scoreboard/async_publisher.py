"""The publisher rows on ``ackbridge.connect_async``: the asyncio twin of
:func:`tests.scoreboard.publisher._publish`, on RabbitMQ classic and quorum, per asyncio transport.

The cell is the sync one's (:func:`tests.scoreboard.publisher.run_cell`'s shape): the same
targets, the same online consumer (its own connection, a thread: the consumer is not the
subject of a publisher row), the same history and scoring (:mod:`tests.scoreboard.publisher_rows`).
Only the publisher is awaited. The faults are the sync rows' (``_inject``): ``connection-cut``
(the fault seam's sever) and ``broker-restart`` (``rabbitmqctl stop_app``, 2 s, ``start_app``),
which stops the shared RabbitMQ: run alone (``--restart``), never beside other tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import traceback
import uuid
from typing import Any

import ackbridge
from ackbridge.errors import AckbridgeError
from ackbridge.messages import ConfirmStatus
from ackbridge.urls import redact
from tests.scoreboard.async_brokers import ASYNCIO_TRANSPORTS, transport_kind
from tests.scoreboard.publisher import (
    MODES,
    PACE_S,
    PENDING_AT_FAULT,
    RETRANSMIT,
    WINDOW,
    OnlineConsumer,
    _inject,
    _left,
    _tail_done,
)
from tests.scoreboard.publisher_rows import PubHistory, PublisherRow, score
from tests.scoreboard.publisher_targets import TARGETS, Target

#: The async publisher rows: (row name, sync target, asyncio transport).
ASYNC_TARGETS = {f"rabbitmq-{queue_type}-async-{transport}": (f"rabbitmq-{queue_type}", transport)
                 for queue_type in ("classic", "quorum") for transport in ASYNCIO_TRANSPORTS}


def async_target(name: str) -> Target:
    sync_name, transport = ASYNC_TARGETS[name]
    target = TARGETS[sync_name]()
    # The online consumer (sync connect) ignores the option; connect_async picks its transport by it.
    return dataclasses.replace(target, broker=name, options={**target.options, "asyncio_transport": transport})


async def _publish(target: Target, fault: str, mode: str, n: int, h: PubHistory) -> None:
    """n ids at full speed; past n/2 the publisher's connection is severed once PENDING_AT_FAULT
    confirms are pending (by 3n/4 at the latest); then paced until a publish after it is confirmed."""
    conn = await ackbridge.connect_async(target.url, **target.options)
    try:
        if transport_kind(conn) != ASYNC_TARGETS[target.broker][1]:  # the row's name, not its options
            raise AssertionError(f"{target.broker} ran on {transport_kind(conn)}")
        publisher = conn.publisher(window=WINDOW, confirm_timeout=5.0, **(RETRANSMIT if mode == "retransmit" else {}))
        confirms: list[Any] = []
        run = uuid.uuid4().hex[:8]
        resolved = [0]  # callbacks run on this loop: no lock

        def on_done(confirm: Any) -> None:
            h.resolved_at[str(confirm.message_id)] = time.monotonic()
            resolved[0] += 1
            if h.fault_end is not None and h.first_confirm_after is None and confirm.outcome.confirmed:
                h.first_confirm_after = time.monotonic()

        injector: threading.Thread | None = None
        started_at = n
        i = after = 0
        while i < n or not _tail_done(h, after):
            message_id = f"{run}-{i}"
            h.attempted.add(message_id)
            h.published_at[message_id] = time.monotonic()
            confirm = await publisher.publish(target.publish_to, message_id.encode(), message_id=message_id)
            confirm.add_done_callback(on_done)
            confirms.append(confirm)
            if not h.injections and i >= n // 2:
                if i + 1 - resolved[0] >= PENDING_AT_FAULT or i >= 3 * n // 4:
                    # The sync rows' injector: a cut here, or the restart on a thread of its own.
                    injector = _inject(target, fault, conn, confirms, h)
                    started_at = i
            elif h.injections and i > started_at and (h.fault_end is None or h.first_confirm_after is None):
                if h.fault_end is None:
                    h.published_during_fault += 1
                await asyncio.sleep(PACE_S)  # a pace: publishing meets the outage and the recovery
            if h.fault_end is not None:
                after += 1
            i += 1
        if injector is not None:
            await asyncio.to_thread(injector.join, 300)
        await publisher.flush(timeout=300)
        h.retransmitted = publisher.retransmitted
        for confirm in confirms:
            outcome = confirm.outcome
            h.outcome(str(confirm.message_id), outcome.status if outcome is not None else ConfirmStatus.UNKNOWN)
    finally:
        try:
            await conn.close()
        except AckbridgeError:
            pass


def run_cell(broker: str, fault: str, mode: str, n: int, deadline_s: float = 300.0) -> PublisherRow:
    try:
        target = async_target(broker)
    except Exception as exc:
        traceback.print_exc()
        return PublisherRow(broker, fault, mode, error=f"broker unavailable: {redact(str(exc))[:120]}")
    h = PubHistory()
    started = time.monotonic()
    try:
        consumer = OnlineConsumer(target, h, 10 * n if mode == "retransmit" else None, started + deadline_s)
        consumer.start()
        if not consumer.ready.wait(60) or consumer.error is not None:
            raise RuntimeError(f"the consumer did not start: {consumer.error!r}")
        asyncio.run(_publish(target, fault, mode, n, h))
        consumer.expected = set(h.attempted if mode == "retransmit" else h.confirmed)
        consumer.join(timeout=deadline_s + 30)
        if consumer.error is not None:
            raise consumer.error
        h.elapsed_s = time.monotonic() - started
        return dataclasses.replace(score(target, fault, mode, h), left=_left(target))
    except Exception as exc:
        traceback.print_exc()
        return PublisherRow(broker, fault, mode, error=f"{type(exc).__name__}: {redact(str(exc))[:120]}")
    finally:
        target.cleanup()


def cells(brokers: list[str] | None = None, modes: list[str] | None = None,
          faults: tuple[str, ...] = ("connection-cut",)) -> list[tuple[str, str, str]]:
    return [(broker, fault, mode) for broker in ASYNC_TARGETS for fault in faults for mode in MODES
            if (not brokers or broker in brokers) and (not modes or mode in modes)]
