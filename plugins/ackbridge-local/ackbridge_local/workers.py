"""The embedded broker's background threads: polling, heartbeat, group commit, reply inbox.

None of them ends on an error unreported. A damaged file ends the connection
(:meth:`LocalTransport.fail`: logged, generation ended, every later call
raises it). A storage error that may pass (disk full) is logged and retried
with a growing pause; the consumer carries on when space returns. Anything
unexpected is logged with its traceback and ends the generation, as a cut
connection would, and the thread carries on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.messages import CONFIRMED, InboundMessage, refused
from ackbridge_local import codec
from ackbridge_local.errors import DamagedFileError, OwnerGone
from ackbridge_local.store import Row

if TYPE_CHECKING:
    from ackbridge_local.transport import LocalTransport

log = logging.getLogger("ackbridge.local")

_BATCH = 512
_MAX_PAUSE = 1.0


class Subscription:
    def __init__(self, name: str, source: str, prefetch: int) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.leased: set[int] = set()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None


class _Trouble:
    """What one thread does after an error: damage ends the connection; anything
    else is logged (once per streak) and retried after a growing pause."""

    def __init__(self, transport: LocalTransport, what: str) -> None:
        self.transport = transport
        self.what = what
        # Retrying storage is reconnecting to the file: the core's one back-off.
        self.backoff = Backoff(max_delay=_MAX_PAUSE, initial=0.01)
        self.streak = 0

    def ok(self) -> None:
        if self.streak:
            log.warning("ackbridge embedded broker %s: %s works again after %d failed attempt(s)",
                        self.transport.path, self.what, self.streak)
        self.backoff.reset()
        self.streak = 0

    def failed(self, exc: BaseException) -> float | None:
        """The pause before the next attempt, or None when the thread is to stop (damage)."""
        if isinstance(exc, DamagedFileError):
            self.transport.fail(exc)
            return None
        if isinstance(exc, ConnectionLostError):
            return None  # closed under us: close() is ending this thread
        self.streak += 1
        if self.streak == 1:
            if isinstance(exc, AckbridgeError):
                log.warning("ackbridge embedded broker %s: %s failed, retrying: %s", self.transport.path, self.what,
                            exc)
            else:
                log.error("ackbridge embedded broker %s: %s failed unexpectedly; ending the generation",
                          self.transport.path, self.what, exc_info=exc)
        if not isinstance(exc, AckbridgeError):
            self.transport.end_generation(f"{self.what} failed: {type(exc).__name__}: {exc}")
        return self.backoff.next_delay()


def poll_loop(transport: LocalTransport, sub: Subscription) -> None:
    idle = 0.001
    # A lease is a write transaction (an fsync): when only a little room is
    # free, wait one short beat for settlements to free more, so one lease
    # serves many deliveries instead of one each. Never more than one beat:
    # an application holding almost the whole prefetch still gets the rest.
    low_water = max(1, min(_BATCH, sub.prefetch // 2))
    deferred = False
    trouble = _Trouble(transport, f"consuming from {sub.source!r}")
    while not sub.stop.is_set() and transport.failure is None:
        rows: list[Row] = []
        generation = 0
        try:
            store = transport.store
            store.reclaim_dead()
            room = sub.prefetch - len(sub.leased)
            if room > 0 and (room >= low_water or deferred or not sub.leased):
                rows, generation = transport.lease(sub, min(room, _BATCH))
                deferred = False
            elif room > 0:
                deferred = True
            trouble.ok()
        except OwnerGone as gone:
            transport.end_generation(
                "this consumer's owner record was taken over (it was presumed dead: paused or silent past its "
                "lease_timeout); its deliveries were returned to the queue", str(gone))
            continue
        except Exception as exc:
            pause = trouble.failed(exc)
            if pause is None:
                return
            sub.stop.wait(pause)
            continue
        for row in rows:
            transport.events.deliver(sub.name, inbound(row, generation))
        if rows:
            idle = 0.001
        elif deferred:
            sub.stop.wait(0.005)
        else:
            sub.stop.wait(idle)
            idle = min(idle * 2, transport.poll_s)


def heartbeat_loop(transport: LocalTransport) -> None:
    beat = max(min(transport.lease_timeout / 4, 2.0), 0.05)
    trouble = _Trouble(transport, "the heartbeat")
    while not transport.closing.wait(beat) and transport.failure is None:
        try:
            store = transport.store
            store.check_file()  # a file deleted, replaced or truncated under us is reported here
            transport.retry_pending()
            owner = transport.ensure_owner()
            if time.monotonic() < transport.heartbeat_fault_until:
                raise BrokerError(f"heartbeat on the embedded broker file {transport.path!r} failed "
                                  "(injected fault)")
            if store.heartbeat(owner):
                transport.heartbeat_ok = time.monotonic()
                trouble.ok()
            else:
                transport.end_generation(
                    "this consumer's owner record was taken over (it was presumed dead: paused or silent past "
                    "its lease_timeout); its deliveries were returned to the queue", owner)
        except Exception as exc:
            if trouble.failed(exc) is None:
                return
            # Before anyone could reclaim this owner's leases (after lease_timeout without a
            # heartbeat), end the generation here: its deliveries go stale, its leases return.
            silent = time.monotonic() - transport.heartbeat_ok
            if silent > transport.lease_timeout / 2 and transport.owner is not None:
                transport.end_generation(f"no heartbeat succeeded for {silent:.1f} s (lease_timeout "
                                         f"{transport.lease_timeout:g} s): {exc}")


def write_loop(transport: LocalTransport) -> None:
    """Group commit: every publish waiting is written in one transaction and confirmed after it."""
    cond = transport.outbox_cond
    while True:
        with cond:
            while ((not transport.outbox or transport.writes_held) and not transport.closing.is_set()
                   and transport.failure is None):
                cond.wait(0.1)
            if not transport.outbox and (transport.closing.is_set() or transport.failure is not None):
                return
            batch, transport.outbox = transport.outbox[:4096], transport.outbox[4096:]
        if transport.failure is not None:
            outcome = refused(str(transport.failure))
        else:
            try:
                transport.store.insert_many([(dest, body, props) for _, _, dest, body, props in batch])
                outcome = CONFIRMED
            except BrokerError as exc:  # typed: disk full, damaged, deleted; nothing was committed
                if isinstance(exc, DamagedFileError):
                    transport.fail(exc)
                outcome = refused(str(exc))
            except Exception as exc:  # not written either: the transaction rolled back
                log.error("ackbridge embedded broker %s: publishing failed unexpectedly", transport.path,
                          exc_info=exc)
                outcome = refused(f"write failed: {type(exc).__name__}: {exc}")
        transport.events.confirm_batch([(seq, outcome) for seq, *_ in batch])
        with cond:
            cond.notify_all()


def inbox_loop(transport: LocalTransport, inbox: str) -> None:
    idle = 0.001
    trouble = _Trouble(transport, "reading replies")
    while not transport.closing.is_set() and transport.failure is None:
        try:
            rows = transport.store.take(inbox, _BATCH)
            trouble.ok()
        except Exception as exc:
            pause = trouble.failed(exc)
            if pause is None:
                return
            transport.closing.wait(pause)
            continue
        for row in rows:
            transport.events.reply(inbound(row, transport.generation))
        idle = 0.001 if rows else min(idle * 2, transport.poll_s)
        transport.closing.wait(idle)


def inbound(row: Row, generation: int) -> InboundMessage:
    props = codec.loads(row.props)
    return InboundMessage(
        wire_tag=row.id, generation=generation, body=bytes(row.body), source=row.queue,
        headers=props.get("headers") or {}, routing_key=row.queue, message_id=props.get("message_id"),
        correlation_id=props.get("correlation_id"), reply_to=props.get("reply_to"),
        content_type=props.get("content_type"), timestamp=props.get("timestamp"),
        redelivered=row.delivery_count > 1, delivery_count=row.delivery_count,
    )
