"""Publishing: the outbox and its group commit.

``publish`` checks a message and queues it; one writer thread writes every
publish waiting in one transaction and confirms them after it commits (with
``fsync``, after the file is on disk). A write that fails refuses the whole
batch: nothing of it was committed.
"""

from __future__ import annotations

import logging
import threading

from ackbridge.errors import BrokerError
from ackbridge.messages import CONFIRMED, OutboundMessage, refused, unknown, unsent
from ackbridge.transport import TransportEvents
from ackbridge_local import codec
from ackbridge_local.broker_file import BrokerFile
from ackbridge_local.errors import DamagedFileError

log = logging.getLogger("ackbridge.local")

#: Publishes written in one transaction at most.
_GROUP = 4096


class Outbox:
    """Publishes waiting for the writer thread: (seq, destination, body, props)."""

    def __init__(self, file: BrokerFile, events: TransportEvents, max_message_bytes: int) -> None:
        self.file = file
        self.events = events
        self.max_message_bytes = max_message_bytes
        self.items: list[tuple[int, str, bytes, str]] = []
        self.cond = threading.Condition()
        self.held = False

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        """Queue *message* for the next group commit, or give its outcome now."""
        if self.file.failure is not None:
            self.events.confirm(seq, refused(str(self.file.failure)))
            return
        if not self.file.is_open or self.file.closing.is_set():
            self.events.confirm(seq, unsent("not connected"))
            return
        limit = self.max_message_bytes
        if len(message.body) > limit:
            self.events.confirm(seq, refused(f"message of {len(message.body)} bytes exceeds "
                                             f"max_message_bytes={limit}"))
            return
        if not destination:
            self.events.confirm(seq, refused("no destination queue given"))
            return
        props = codec.props_of(message)
        with self.cond:
            self.items.append((seq, destination, message.body, props))
            if len(self.items) == 1:
                self.cond.notify()

    def hold(self, hold: bool) -> None:
        """Pause group commits, so confirms stay pending (fault injection)."""
        with self.cond:
            self.held = hold
            self.cond.notify_all()

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def lose(self, reason: str) -> None:
        """The connection was cut: what was not written yet has an unknown outcome."""
        with self.cond:
            lost, self.items = self.items, []
        for seq, *_ in lost:
            self.events.confirm(seq, unknown(f"{reason} before the write committed"))

    def flush_and_close(self) -> None:
        """Write what waits (unless the file is damaged), then make the writer thread end."""
        with self.cond:
            self.held = False
            while self.items and self.file.failure is None:
                self.cond.notify_all()
                self.cond.wait(0.05)
            self.file.closing.set()
            self.cond.notify_all()

    def write_loop(self) -> None:
        """The writer thread: every publish waiting is written in one transaction and confirmed after it."""
        cond, file = self.cond, self.file
        while True:
            with cond:
                while (not self.items or self.held) and not file.closing.is_set() and file.failure is None:
                    cond.wait(0.1)
                if not self.items and (file.closing.is_set() or file.failure is not None):
                    return
                batch, self.items = self.items[:_GROUP], self.items[_GROUP:]
            if file.failure is not None:
                outcome = refused(str(file.failure))
            else:
                try:
                    file.store.insert_many([(dest, body, props) for _, dest, body, props in batch])
                    outcome = CONFIRMED
                except BrokerError as exc:  # typed: disk full, damaged, deleted; nothing was committed
                    if isinstance(exc, DamagedFileError):
                        file.fail(exc)
                    outcome = refused(str(exc))
                except Exception as exc:  # not written either: the transaction rolled back
                    log.error("ackbridge embedded broker %s: publishing failed unexpectedly", file.path,
                              exc_info=exc)
                    outcome = refused(f"write failed: {type(exc).__name__}: {exc}")
            self.events.confirm_batch([(seq, outcome) for seq, *_ in batch])
            with cond:
                cond.notify_all()
