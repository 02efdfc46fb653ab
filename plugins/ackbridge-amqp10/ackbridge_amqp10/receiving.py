"""The receive side: subscriptions, link credit, deliveries and their settlement,
and the reply inbox of labelled acks. Everything here runs on the container
thread, except :func:`credit_to_grant` (pure).

Closing: a receiver's session is ended with its link, and an unsubscribe (or the
transport's close, :meth:`Receiving.end_all`) completes once the broker answered
that ``end``, within ``end_wait`` seconds: see :mod:`~ackbridge_amqp10.ending`.

Credit: a receiver starts with ``prefetch`` credit and gets credit back for
settled deliveries (:func:`credit_to_grant`), so unsettled deliveries never
exceed ``prefetch``.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from proton import Condition, Delivery, Endpoint

from ackbridge.kernel.backoff import Backoff
from ackbridge.messages import ACK, REJECT, WireSettle
from ackbridge.transport import TransportEvents
from ackbridge_amqp10 import codec
from ackbridge_amqp10.container import ContainerThread
from ackbridge_amqp10.ending import SessionEnds
from ackbridge_amqp10.errors import broker_error
from ackbridge_amqp10.links import Wire, close_link, reply_address, session

log = logging.getLogger("ackbridge.amqp10")


def credit_to_grant(prefetch: int, held: int, credit: int) -> int:
    """Link credit to add so that what the receiver holds unsettled plus its credit
    comes back to *prefetch*, in batches (fewer flow frames): nothing while the
    credit left is above half the prefetch and less than half is owed.

    *credit* is proton's count, which goes below zero when the broker sent more
    than was granted; the grant first brings it back to zero, and a receiver
    holding more than *prefetch* gets no new credit until it settles below it."""
    target = max(prefetch - held, 0)
    grant = target - credit
    if grant <= 0:
        return 0
    half = prefetch // 2
    if credit < 0 or grant > half or credit <= half:
        return grant
    return 0


@dataclass(eq=False)
class Sub:
    name: str
    source: str
    prefetch: int
    backoff: Backoff  # re-attach after the broker detached a live subscription
    receiver: Any = None
    attached: Future[None] | None = None
    held: int = 0  # deliveries on the current receiver not settled yet
    credit: int = 0  # link credit granted and not used yet (proton's count, kept here: no C call per message)


@dataclass(eq=False)
class Inbox:
    address: str  # where replies are sent (the reply-to)
    dynamic: bool
    source: str | None = None  # what the receiver attaches to, when not the address itself
    receiver: Any = None
    attached: Future[str] | None = field(default=None)


class Receiving:
    """Subscriptions and the reply inbox of one transport (container thread only).

    It is given what it needs: the connection's state (*wire*), the container
    thread, the core's events, and how to describe a peer's condition.
    *count_header*: read the delivery count (the table declares it);
    :attr:`modified`: requeue with 'modified' (set once the peer said it is safe);
    *end_wait*: how long an unsubscribe or close waits for the broker's ``end``."""

    def __init__(self, wire: Wire, container: ContainerThread, events: TransportEvents, *,
                 describe: Callable[[Any], str], reconnect_max_delay: float, inbox_template: str,
                 count_header: bool, end_wait: float) -> None:
        self._wire = wire
        self._container = container
        self._events = events
        self._describe = describe
        self._reconnect_max_delay = reconnect_max_delay
        self._inbox_template = inbox_template
        self._count_header = count_header
        self._end_wait = end_wait
        self.ends = SessionEnds()
        self.modified = False
        self.subs: dict[str, Sub] = {}
        self.receivers: dict[Any, Sub] = {}  # receiver link -> its subscription
        self.inboxes: dict[Any, Inbox] = {}  # receiver link -> the inbox
        self.inbox: Inbox | None = None
        self._tags = itertools.count(1)
        # tag -> (proton delivery, its subscription, the receiver link it came on)
        self._deliveries: dict[int, tuple[Any, Sub, Any]] = {}

    # ---- subscriptions -------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, prefetch: int, future: Future[None]) -> None:
        codec.check_address(source)  # raised through the future to either face
        self._wire.require_conn()
        sub = Sub(subscription, source, prefetch, Backoff(self._reconnect_max_delay), attached=future)
        self.subs[subscription] = sub

        def failed(f: Future[None]) -> None:
            if f.cancelled() or f.exception() is not None:
                self._container.submit(lambda: self.drop(sub))

        future.add_done_callback(failed)
        self.attach(sub)

    def attach(self, sub: Sub) -> None:
        conn, container = self._wire.conn, self._container.container
        if conn is None or container is None:
            return
        receiver = container.create_receiver(session(conn), sub.source, name=f"{sub.name}-g{self._wire.generation}")
        receiver.flow(sub.prefetch)
        sub.held = 0
        sub.credit = sub.prefetch
        sub.receiver = receiver
        self.receivers[receiver] = sub
        if sub.attached is not None and not sub.attached.done():
            self._wire.waiters[receiver] = sub.attached

    def reattach_all(self) -> None:
        """After a (re)connect: every subscription and the inbox on the new connection."""
        for sub in self.subs.values():
            self.attach(sub)
        if self.inbox is not None:
            self._attach_inbox(self.inbox)

    def drop(self, sub: Sub) -> None:
        if self.subs.get(sub.name) is sub:
            del self.subs[sub.name]
        if sub.receiver is not None:
            self.receivers.pop(sub.receiver, None)
            close_link(sub.receiver)
            self.ends.ending(sub.receiver.session)
            sub.receiver = None
        for tag in [t for t, (_, s, _r) in self._deliveries.items() if s is sub]:
            del self._deliveries[tag]

    def unsubscribe(self, subscription: str, future: Future[None]) -> None:
        """Detach and end the subscription's session; *future* completes once the broker
        answered the ``end`` (every settlement sent before it applied), or after end_wait."""
        sub = self.subs.get(subscription)
        session = sub.receiver.session if sub is not None and sub.receiver is not None else None
        if sub is not None:
            self.drop(sub)
        if sub is None or session is None:
            future.set_result(None)
            return
        self._wait_ends(future, [session], f"subscription {subscription} on {sub.source!r}")

    def end_all(self, future: Future[None]) -> None:
        """The transport's close: detach every receiver and end its session; *future*
        completes once the broker answered each ``end`` (or after end_wait)."""
        for sub in list(self.subs.values()):
            self.drop(sub)
        if self.inbox is not None:
            self._drop_inbox(self.inbox)
        self._wait_ends(future, None, "the receivers")

    def _wait_ends(self, future: Future[None], sessions: list[Any] | None, what: str) -> None:
        self.ends.wait(future, sessions)
        if future.done():
            return

        def give_up() -> None:
            if not future.done():
                log.warning("amqp10: the broker did not answer the end of %s within %.1f s; settlements sent "
                            "just before may not have taken effect", what, self._end_wait)
                future.set_result(None)

        self._container.schedule(self._end_wait, give_up)

    def generation_ended(self) -> None:
        self.ends.clear()
        self._deliveries.clear()
        for sub in self.subs.values():
            sub.receiver = None
        if self.inbox is not None:
            self.inbox.receiver = None

    def link_opened(self, receiver: Any) -> None:
        sub = self.receivers.get(receiver)
        if sub is not None:
            sub.backoff.reset()

    def receiver_closed(self, link: Any, condition: Any) -> None:
        sub = self.receivers.pop(link, None)
        if sub is None:
            return
        if sub.receiver == link:
            sub.receiver = None
        for tag in [t for t, (_, _s, r) in self._deliveries.items() if r == link]:
            del self._deliveries[tag]
        live = self._wire.live
        if self.subs.get(sub.name) is not sub or self._wire.closing or live is None:
            return
        attached = sub.attached
        if attached is not None and attached.done() and (attached.cancelled() or attached.exception() is not None):
            self.drop(sub)  # subscribe() already raised the refusal
            return
        # The broker detached a live subscription (e.g. the queue was deleted): try again later.
        log.warning("amqp10 subscription %s on %r detached by the broker: %s", sub.name, sub.source,
                    self._describe(condition))

        def again() -> None:
            if self.subs.get(sub.name) is sub and sub.receiver is None and self._wire.live == live:
                self.attach(sub)

        self._container.schedule(sub.backoff.next_delay(), again)

    # ---- deliveries ----------------------------------------------------------------
    def transfer(self, receiver: Any, delivery: Any, raw: bytes) -> None:
        """A whole message arrived on *receiver* (its bytes read and the link advanced)."""
        if receiver in self.inboxes:
            self._reply(receiver, delivery, raw)
            return
        sub = self.receivers.get(receiver)
        live = self._wire.live
        if sub is None or live is None or sub.receiver != receiver:
            # A late transfer on a link we are closing: give it back.
            delivery.update(Delivery.RELEASED)
            delivery.settle()
            return
        sub.credit -= 1
        if sub.credit < 0:
            # The broker sent more than the credit granted (RabbitMQ 3.x does, now
            # and then). proton's credit is below zero too, and its next flow frame
            # would carry that as an unsigned number (about 4 billion): the broker
            # would send the whole queue. Bring it back to zero at once.
            sub.receiver.flow(-sub.credit)
            sub.credit = 0
        tag = next(self._tags)
        try:
            inbound = codec.from_bytes(raw, wire_tag=tag, generation=live, source=sub.source,
                                       count_header=self._count_header)
        except Exception as exc:
            self._undecodable(sub, delivery, exc)
            return
        # sub.receiver, not *receiver*: the event's wrapper is a new object per event,
        # and apply() gives credit back only while `sub.receiver is` the one it came on.
        self._deliveries[tag] = (delivery, sub, sub.receiver)
        sub.held += 1
        self._events.deliver(sub.name, inbound)

    def _undecodable(self, sub: Sub, delivery: Any, exc: Exception) -> None:
        """A transfer that is not an AMQP message: it can never be delivered, and
        giving it back would bring it again forever. Reject it (the broker
        dead-letters it where the queue has a target) with the reason."""
        reason = f"ackbridge cannot decode this message: {type(exc).__name__}: {exc}"
        log.warning("amqp10 subscription %s on %r: %s; rejected", sub.name, sub.source, reason)
        delivery.local.condition = Condition("amqp:decode-error", reason[:500])
        delivery.update(Delivery.REJECTED)
        delivery.settle()
        self._grant(sub)

    def apply(self, ops: Sequence[WireSettle]) -> None:
        """Put settlements on the wire. An op whose generation is not the live one
        lost the race with a connection loss: it is dropped, never applied."""
        live = self._wire.live
        modified = self.modified
        # Credit counted per subscription (hashed by identity) rather than per proton
        # Link wrapper, whose hash is a Python call into the C binding.
        credit: dict[Sub, int] = {}
        for op in ops:
            if op.generation != live:
                continue
            found = self._deliveries.pop(op.wire_tag, None)  # type: ignore[call-overload]
            if found is None:
                continue  # its link is gone; the broker returns it
            delivery, sub, receiver = found
            if op.verb is ACK:
                delivery.update(Delivery.ACCEPTED)
            elif op.verb is REJECT:
                delivery.update(Delivery.REJECTED)
            elif modified:
                delivery.local.failed = True
                delivery.update(Delivery.MODIFIED)
            else:
                delivery.update(Delivery.RELEASED)
            delivery.settle()
            # Identity, not delivery.link (proton wraps a new Link object per read):
            # credit goes back only while the receiver it came on is still the sub's.
            if receiver is not None and sub.receiver is receiver:
                credit[sub] = credit.get(sub, 0) + 1
        for sub, n in credit.items():
            sub.held -= n
            self._grant(sub)

    def _grant(self, sub: Sub) -> None:
        receiver = sub.receiver
        if receiver is None or self.subs.get(sub.name) is not sub or not receiver.state & Endpoint.LOCAL_ACTIVE:
            return
        grant = credit_to_grant(sub.prefetch, sub.held, sub.credit)
        if grant:
            receiver.flow(grant)
            sub.credit += grant

    # ---- the reply inbox -----------------------------------------------------------
    def open_inbox(self, future: Future[str]) -> None:
        self._wire.require_conn()
        if self.inbox is not None:
            future.set_result(self.inbox.address)
            return
        template = self._inbox_template
        dynamic = template == "dynamic"
        source = "" if dynamic else template.replace("{id}", uuid.uuid4().hex)
        inbox = Inbox(reply_address(source), dynamic, source=source, attached=future)

        def failed(f: Future[str]) -> None:
            if f.cancelled() or f.exception() is not None:
                self._container.submit(lambda: self._drop_inbox(inbox))

        future.add_done_callback(failed)
        self.inbox = inbox
        self._attach_inbox(inbox)

    def _drop_inbox(self, inbox: Inbox) -> None:
        if self.inbox is inbox:
            self.inbox = None
        if inbox.receiver is not None:
            self.inboxes.pop(inbox.receiver, None)
            close_link(inbox.receiver)
            self.ends.ending(inbox.receiver.session)

    def _attach_inbox(self, inbox: Inbox) -> None:
        conn, container = self._wire.conn, self._container.container
        if conn is None or container is None:
            return
        name = f"inbox-{uuid.uuid4().hex[:12]}"
        if inbox.dynamic:
            receiver = container.create_receiver(session(conn), None, dynamic=True, name=name)
        else:
            receiver = container.create_receiver(session(conn), inbox.source, name=name)
        receiver.flow(100)
        inbox.receiver = receiver
        self.inboxes[receiver] = inbox

    def inbox_attached(self, receiver: Any) -> None:
        inbox = self.inboxes.get(receiver)
        if inbox is None:
            return
        if inbox.dynamic:
            address = receiver.remote_source.address
            if not address:
                return  # refused: the detach (with its condition) follows
            inbox.address = address
        if inbox.attached is not None and not inbox.attached.done():
            inbox.attached.set_result(inbox.address)

    def inbox_gone(self, link: Any, refusal: str) -> None:
        inbox = self.inboxes.pop(link, None)
        if inbox is None:
            return
        if inbox.attached is not None and not inbox.attached.done():
            refused = broker_error(self._wire.what, f"the broker refused the reply inbox: {refusal}")
            inbox.attached.set_exception(refused)
        if inbox.receiver == link:
            inbox.receiver = None

    def _reply(self, receiver: Any, delivery: Any, raw: bytes) -> None:
        try:
            inbound = codec.from_bytes(raw, wire_tag=0, generation=self._wire.live or self._wire.generation,
                                       source=self.inbox.address if self.inbox else "", count_header=False)
        except Exception as exc:
            log.warning("amqp10 reply inbox: cannot decode a reply (%s: %s); rejected", type(exc).__name__, exc)
            delivery.update(Delivery.REJECTED)
            inbound = None
        else:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        receiver.flow(1)
        if inbound is not None:
            self._events.reply(inbound)
