"""The ``local://`` transport: the core's verbs on top of :class:`~ackbridge_local.store.Store`."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ackbridge.capabilities import Capabilities, Verb, emulated, native
from ackbridge.errors import BrokerError, ConnectionLostError, InvalidURLError, StaleDeliveryError
from ackbridge.messages import (
    CONFIRMED,
    InboundMessage,
    OutboundMessage,
    WireSettle,
    WireVerb,
    refused,
    unknown,
)
from ackbridge.options import OptionSpec, positive_int
from ackbridge.transport import ThreadedAsyncSide, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_local import codec
from ackbridge_local.store import Row, Store, dead_letter_queue

CAPABILITIES = Capabilities(
    broker="embedded",
    verbs={
        Verb.ACK: native("row deleted in one SQLite transaction"),
        Verb.REQUEUE: native("lease released; the message keeps its place"),
        Verb.REJECT: native("moved to QUEUE.dlq (queues dead-letter unless declared otherwise)"),
        Verb.CUMULATIVE_ACK: emulated("individual acks in one transaction"),
        Verb.CONFIRM: native("after the transaction commits (fsync unless fsync=false)"),
        Verb.CONFIRM_REFUSED: native("message larger than max_message_bytes, or the write failed"),
        Verb.DELIVERY_COUNT: native("counted on every lease"),
        Verb.LABELLED_ACKS: native("replies go to a per-connection inbox queue"),
    },
    notes=("local default for one machine; not a production broker",),
)

OPTIONS = (
    OptionSpec("lease_timeout", float, 30.0, "seconds without heartbeat before leases return",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("fsync", bool, True, "fsync each group commit before confirming"),
    positive_int("max_message_bytes", 16 * 1024 * 1024, "larger publishes are refused"),
    OptionSpec("poll_ms", float, 20.0, "longest idle wait between polls", lambda v: v > 0, "must be > 0"),
)

_BATCH = 512


class _Subscription:
    def __init__(self, name: str, source: str, prefetch: int) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.leased: set[int] = set()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None


class LocalTransport(ThreadedAsyncSide):
    capabilities = CAPABILITIES
    option_specs = OPTIONS
    supports_sync = True
    supports_async = True

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        path = url.location
        if not path:
            raise InvalidURLError(f"{url.redacted!r}: give a file, e.g. local:///tmp/ackbridge.db")
        self.path = os.path.abspath(path)
        self._store: Store | None = None
        self._generation = 0
        self._owner = ""
        self._lock = threading.RLock()
        self._subs: dict[str, _Subscription] = {}
        self._outbox: list[tuple[int, int, str, bytes, str]] = []
        self._outbox_cond = threading.Condition()
        self._hold_writes = False
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._poll_s = float(options.get("poll_ms", 20.0)) / 1000.0

    # ---- lifecycle -------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._generation

    @property
    def store(self) -> Store:
        if self._store is None:
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        return self._store

    def open(self) -> None:
        try:
            self._store = Store(self.path, lease_timeout=float(self.options.get("lease_timeout", 30.0)),
                                fsync=bool(self.options.get("fsync", True)))
        except (OSError, sqlite3.Error) as exc:
            raise BrokerError(f"cannot open the embedded broker file {self.path!r}: {exc}") from None
        self._new_generation()
        for target, name in ((self._write_loop, "writer"), (self._heartbeat_loop, "heartbeat")):
            thread = threading.Thread(target=target, name=f"ackbridge-local-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _new_generation(self) -> None:
        self._generation += 1
        self._owner = f"{os.getpid()}-{uuid.uuid4().hex[:10]}-g{self._generation}"
        self.store.register_owner(self._owner)

    def close(self) -> None:
        if self._store is None or self._closing.is_set():
            return
        for sub in list(self._subs.values()):
            self._stop_sub(sub)
        with self._outbox_cond:
            self._hold_writes = False
            while self._outbox:
                self._outbox_cond.notify_all()
                self._outbox_cond.wait(0.05)
            self._closing.set()
            self._outbox_cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self.store.release_owner(self._owner)
        self.store.close()
        self._store = None

    def sever(self, reason: str = "connection severed") -> None:
        """Behave as if the connection dropped: leases return to the queue, the
        generation ends, unwritten publishes become unknown. (Fault injection.)"""
        with self._lock:
            old_generation, old_owner = self._generation, self._owner
            with self._outbox_cond:
                lost, self._outbox = self._outbox, []
            self.store.release_owner(old_owner)
            for sub in self._subs.values():
                sub.leased.clear()
            self._new_generation()
        for seq, *_ in lost:
            self.events.confirm(seq, unknown(f"{reason} before the write committed"))
        self.events.generation_ended(old_generation, reason)

    def hold_writes(self, hold: bool) -> None:
        """Pause group commits, so confirms stay pending (fault injection)."""
        with self._outbox_cond:
            self._hold_writes = hold
            self._outbox_cond.notify_all()

    # ---- queues ---------------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self.store.declare(name, dead_letter)

    # ---- consuming -------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        sub = _Subscription(subscription, source, prefetch)
        with self._lock:
            self._subs[subscription] = sub
        sub.thread = threading.Thread(target=self._poll_loop, args=(sub,), name=f"ackbridge-local-{subscription}",
                                      daemon=True)
        sub.thread.start()

    def unsubscribe(self, subscription: str) -> None:
        sub = self._subs.get(subscription)
        if sub is not None:
            self._stop_sub(sub)

    def _stop_sub(self, sub: _Subscription) -> None:
        sub.stop.set()
        if sub.thread is not None and sub.thread is not threading.current_thread():
            sub.thread.join(timeout=5)
        with self._lock:
            self._subs.pop(sub.name, None)
            leased, sub.leased = list(sub.leased), set()
            if leased and self._store is not None:
                self._store.settle(self._owner, [], leased, [])

    def _poll_loop(self, sub: _Subscription) -> None:
        idle = 0.001
        # A lease is a write transaction (an fsync): when only a little room is
        # free, wait one short beat for settlements to free more, so one lease
        # serves many deliveries instead of one each. Never more than one beat:
        # an application holding almost the whole prefetch still gets the rest.
        low_water = max(1, min(_BATCH, sub.prefetch // 2))
        deferred = False
        while not sub.stop.is_set():
            try:
                self.store.reclaim_dead()
                with self._lock:
                    room = sub.prefetch - len(sub.leased)
                    rows: list[Row] = []
                    if room > 0 and (room >= low_water or deferred or not sub.leased):
                        rows = self.store.lease(sub.source, self._owner, min(room, _BATCH))
                        sub.leased.update(r.id for r in rows)
                        deferred = False
                    elif room > 0:
                        deferred = True
                    generation = self._generation
            except ConnectionLostError:
                return
            for row in rows:
                self.events.deliver(sub.name, _inbound(row, generation))
            if rows:
                idle = 0.001
            elif deferred:
                sub.stop.wait(0.005)
            else:
                sub.stop.wait(idle)
                idle = min(idle * 2, self._poll_s)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        with self._lock:
            stale = [op for op in ops if op.generation != self._generation]
            if stale:
                raise StaleDeliveryError(
                    f"{len(stale)} settlement(s) from connection generation {stale[0].generation} "
                    f"(now {self._generation}); nothing was sent")
            acks: list[int] = []
            requeues: list[int] = []
            rejects: list[tuple[int, str]] = []
            for op in ops:
                row_id = int(op.wire_tag)  # type: ignore[call-overload]
                if op.verb is WireVerb.ACK:
                    acks.append(row_id)
                elif op.verb is WireVerb.REQUEUE:
                    requeues.append(row_id)
                else:
                    source = op.message.source if op.message else ""
                    target = dead_letter_queue(source) if self.store.has_dead_letter(source) else ""
                    rejects.append((row_id, target))
            matched = self.store.settle(self._owner, acks, requeues, rejects)
            if matched != len(ops):
                raise StaleDeliveryError(
                    "the lease on these deliveries was lost (consumer presumed dead); nothing was settled "
                    "and the broker will redeliver them")
            for op in ops:
                sub = self._subs.get(op.subscription)
                if sub is not None:
                    sub.leased.discard(int(op.wire_tag))  # type: ignore[call-overload]

    # ---- publishing ----------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        if self._store is None or self._closing.is_set():
            self.events.confirm(seq, unknown("not connected"))
            return
        limit = int(self.options.get("max_message_bytes", 16 * 1024 * 1024))
        if len(message.body) > limit:
            self.events.confirm(seq, refused(f"message of {len(message.body)} bytes exceeds "
                                             f"max_message_bytes={limit}"))
            return
        if not destination:
            self.events.confirm(seq, refused("no destination queue given"))
            return
        props = codec.dumps({
            "headers": dict(message.headers), "message_id": message.message_id,
            "correlation_id": message.correlation_id, "reply_to": message.reply_to,
            "content_type": message.content_type, "timestamp": message.timestamp or time.time(),
        })
        with self._outbox_cond:
            self._outbox.append((seq, self._generation, destination, message.body, props))
            if len(self._outbox) == 1:
                self._outbox_cond.notify()

    def _write_loop(self) -> None:
        while True:
            with self._outbox_cond:
                while (not self._outbox or self._hold_writes) and not self._closing.is_set():
                    self._outbox_cond.wait(0.1)
                if self._closing.is_set() and not self._outbox:
                    return
                batch, self._outbox = self._outbox[:4096], self._outbox[4096:]
            try:
                self.store.insert_many([(dest, body, props) for _, _, dest, body, props in batch])
                outcome = CONFIRMED
            except Exception as exc:  # nothing was written: the transaction rolled back
                outcome = refused(f"write failed: {type(exc).__name__}: {exc}")
            for seq, *_ in batch:
                self.events.confirm(seq, outcome)
            with self._outbox_cond:
                self._outbox_cond.notify_all()

    def _heartbeat_loop(self) -> None:
        beat = max(min(float(self.options.get("lease_timeout", 30.0)) / 4, 2.0), 0.05)
        while not self._closing.wait(beat):
            try:
                self.store.heartbeat(self._owner)
            except Exception:
                return

    # ---- replies ----------------------------------------------------------------------
    def open_reply_inbox(self) -> str:
        inbox = f"ackbridge.reply.{uuid.uuid4().hex}"
        self.store.declare(inbox, False)
        thread = threading.Thread(target=self._inbox_loop, args=(inbox,), name="ackbridge-local-inbox", daemon=True)
        thread.start()
        self._threads.append(thread)
        return inbox

    def _inbox_loop(self, inbox: str) -> None:
        idle = 0.001
        while not self._closing.is_set():
            try:
                rows = self.store.take(inbox, _BATCH)
            except Exception:
                return
            for row in rows:
                self.events.reply(_inbound(row, self._generation))
            idle = 0.001 if rows else min(idle * 2, self._poll_s)
            self._closing.wait(idle)


def _inbound(row: Row, generation: int) -> InboundMessage:
    props = codec.loads(row.props)
    return InboundMessage(
        wire_tag=row.id, generation=generation, body=bytes(row.body), source=row.queue,
        headers=props.get("headers") or {}, routing_key=row.queue, message_id=props.get("message_id"),
        correlation_id=props.get("correlation_id"), reply_to=props.get("reply_to"),
        content_type=props.get("content_type"), timestamp=props.get("timestamp"),
        redelivered=row.delivery_count > 1, delivery_count=row.delivery_count,
    )
