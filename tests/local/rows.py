"""The broker file behind the transport's back, for the settling tests: read on sqlite3
connections of the test's own, its write lock held, a lease taken away; and a
transport driven without a core (its events kept)."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import ackbridge
from ackbridge.errors import AckbridgeError
from ackbridge.messages import ConfirmOutcome, InboundMessage, WireSettle, WireVerb
from ackbridge.testing import eventually
from ackbridge.urls import parse_url
from ackbridge_local.connection import LocalTransport
from tests.local.harness import LocalHarness


def rows_with(path: Path, body: bytes) -> int:
    """How many rows of the file hold *body*."""
    db = sqlite3.connect(path, timeout=30)
    try:
        return int(db.execute("SELECT count(*) FROM messages WHERE body=?", (body,)).fetchone()[0])
    finally:
        db.close()


def bodies_in(path: Path, queue: str) -> set[str]:
    """The bodies of every row of *queue* in the file, ready or leased."""
    db = sqlite3.connect(path, timeout=30)
    try:
        return {bytes(row[0]).decode() for row in db.execute("SELECT body FROM messages WHERE queue=?", (queue,))}
    finally:
        db.close()


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[None]:
    """Hold the file's write lock, as another process's transaction would: every commit waits."""
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
    finally:
        db.execute("ROLLBACK")
        db.close()


def take_lease(path: Path, body: bytes) -> None:
    """Give *body*'s lease to another live owner behind the transport's back, as another
    process's sweep and lease would. Not released to no one: the transport's own poller
    would lease it again before the settle under test (a race the suite lost under load)."""
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        db.execute("INSERT OR REPLACE INTO owners(owner, pid, host, heartbeat, lease_timeout) VALUES (?, ?, ?, ?, ?)",
                   ("another-consumer", os.getpid(), socket.gethostname(), time.time(), 3600.0))
        db.execute("UPDATE messages SET owner='another-consumer' WHERE body=?", (body,))
    finally:
        db.close()


def publish(harness: LocalHarness, queue: str, bodies: Sequence[bytes]) -> None:
    with ackbridge.connect(harness.url()) as conn:
        for body in bodies:
            conn.publish(queue, body)
        assert conn.flush(timeout=60)


class Recorder:
    """The transport's events, kept (no core): what it delivered, and the generations it ended."""

    def __init__(self) -> None:
        self.delivered: list[InboundMessage] = []
        self.ended: list[int] = []

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        self.delivered.append(message)

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        pass

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        pass

    def generation_ended(self, generation: int, reason: str = "") -> None:
        self.ended.append(generation)

    def reply(self, message: InboundMessage) -> None:
        pass

    def failed(self, error: AckbridgeError, subscription: str | None = None) -> None:
        pass


@contextlib.contextmanager
def transport_on(harness: LocalHarness, queue: str, prefetch: int = 2) -> Iterator[tuple[LocalTransport, Recorder]]:
    """A transport subscribed to *queue* as subscription "s", its events recorded."""
    events = Recorder()
    transport = LocalTransport(parse_url(harness.url()), {}, events)
    transport.open()
    try:
        transport.subscribe("s", queue, prefetch=prefetch)
        yield transport, events
    finally:
        transport.close()


def delivered(events: Recorder, count: int) -> list[InboundMessage]:
    """The first *count* deliveries, once they all came."""
    return eventually(lambda: list(events.delivered[:count]) if len(events.delivered) >= count else None)


def ack_of(message: InboundMessage) -> list[WireSettle]:
    return [WireSettle(WireVerb.ACK, message.wire_tag, message.generation, "s", False, message)]


def one(messages: Sequence[InboundMessage], body: bytes) -> InboundMessage:
    [found] = [m for m in messages if m.body == body]
    return found
