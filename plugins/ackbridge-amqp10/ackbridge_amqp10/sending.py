"""The send side: sender links (one per destination address), publishes and their
outcomes (confirms).

A publish is checked and encoded on the publishing thread (:meth:`Sending.publish`);
the container thread only moves its bytes (:meth:`Sending.send`) and maps the
broker's outcome to a confirm (:meth:`Sending.outcome`). Every publish is
confirmed exactly once: confirmed, refused, or unknown when its link or
connection goes first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cproton import pn_delivery as _pn_delivery  # type: ignore[import-untyped]  # proton's C binding ships no types
from proton import Delivery

from ackbridge.errors import ConnectionLostError, InvalidOptionError
from ackbridge.messages import CONFIRMED, ConfirmOutcome, OutboundMessage, refused, unknown, unsent
from ackbridge.transport import TransportEvents
from ackbridge.transport.text import CheckedOnce
from ackbridge_amqp10 import codec
from ackbridge_amqp10.container import ContainerThread
from ackbridge_amqp10.links import Wire, close_link, session
from ackbridge_amqp10.peer_text import disposition_condition


@dataclass(eq=False)
class Out:
    """One sender link (one destination address) and its unconfirmed publishes."""

    address: str
    link: Any
    pending: dict[int, None] = field(default_factory=dict)
    credited: bool = False


class Sending:
    """Sender links and unconfirmed publishes of one transport. It is given the
    connection's state, the container thread, the core's events and how to
    describe a peer's condition."""

    def __init__(self, wire: Wire, container: ContainerThread, events: TransportEvents, *,
                 describe: Callable[[Any], str], max_links: int) -> None:
        self._wire = wire
        self._container = container
        self._events = events
        self._describe = describe
        self._max_links = max_links
        self._check_address = CheckedOnce(codec.check_address)
        # --- container thread only ---
        self.outs: dict[str, Out] = {}
        self.by_link: dict[Any, Out] = {}
        self._seq_out: dict[int, Out] = {}  # unconfirmed publish -> its sender link

    # ---- the publishing thread -----------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        events = self._events
        if not destination:
            events.confirm(seq, refused("no destination address given"))
            return
        try:
            self._check_address(destination)
        except InvalidOptionError as exc:
            events.confirm(seq, refused(f"not sent: {exc}"))
            return
        # Encoded here, on the publishing thread: the container thread only moves
        # bytes, and a message that cannot be encoded is refused alone, at once.
        try:
            data = codec.encode(message)
        except Exception as exc:
            events.confirm(seq, refused(f"cannot encode message: {type(exc).__name__}: {exc}"))
            return
        try:
            self._container.submit(lambda: self.send(seq, destination, data))
        except ConnectionLostError as exc:
            events.confirm(seq, unknown(str(exc)))

    # ---- the container thread ------------------------------------------------------
    def send(self, seq: int, destination: str, data: bytes) -> None:
        wire = self._wire
        if wire.conn is None or wire.live is None or wire.closing:
            self._events.confirm(seq, unsent("not connected (closing or reconnecting); nothing was sent"))
            return
        out = self.outs.get(destination)
        if out is None:
            out = self._open(destination)
        out.pending[seq] = None
        self._seq_out[seq] = out
        # What proton's Message.send does, with the bytes encoded already. The
        # delivery is made through the C binding: Link.delivery wraps it in a
        # Python object (with its own attribute record) that nothing here reads.
        link = out.link
        _pn_delivery(link._impl, str(seq))
        link.stream(data)
        link.advance()

    def _open(self, address: str) -> Out:
        container = self._container.container
        assert container is not None
        if len(self.outs) >= self._max_links:
            for addr, old in list(self.outs.items()):
                if not old.pending:
                    del self.outs[addr]
                    self.by_link.pop(old.link, None)
                    close_link(old.link)
                    if len(self.outs) < self._max_links:
                        break
        link = container.create_sender(session(self._wire.conn), address, name=f"out-{uuid.uuid4().hex[:12]}")
        out = Out(address, link)
        self.outs[address] = out
        self.by_link[link] = out
        return out

    def credited(self, link: Any) -> None:
        """The broker granted credit on *link*: it accepted the attach."""
        out = self.by_link.get(link)
        if out is not None:
            out.credited = True

    def outcome(self, delivery: Any) -> None:
        """The broker updated a publish's delivery."""
        # Found by tag (our seq, unique per connection), not by delivery.link:
        # proton builds a new Link wrapper on every .link read, a real cost per message.
        try:
            seq = int(delivery.tag)
        except (TypeError, ValueError):
            return
        out = self._seq_out.get(seq)
        if out is None or seq not in out.pending:
            return
        state = delivery.remote_state
        if state == Delivery.ACCEPTED:
            result = CONFIRMED
        elif state == Delivery.REJECTED:
            reason = self._describe(disposition_condition(delivery.remote))
            result = refused(f"rejected by the broker: {reason}")
        elif state == Delivery.RELEASED:
            result = refused("released by the broker (not delivered to any queue)")
        elif state == Delivery.MODIFIED:
            how = "undeliverable here" if delivery.remote.undeliverable else "delivery failed"
            result = refused(f"modified by the broker ({how})")
        elif delivery.settled:
            result = unknown("the broker settled the delivery without an outcome")
        else:
            return  # a non-terminal state (e.g. received): wait for the outcome
        del out.pending[seq]
        del self._seq_out[seq]
        delivery.settle()
        self._events.confirm(seq, result)

    def _fail(self, out: Out, result: ConfirmOutcome) -> None:
        pending, out.pending = list(out.pending), {}
        for seq in pending:
            self._seq_out.pop(seq, None)
        if pending:
            self._events.confirm_batch([(seq, result) for seq in pending])

    def fail_all(self, reason: str) -> None:
        """The connection is ending: every unconfirmed publish is unknown."""
        outs = list(self.outs.values())
        self.outs.clear()
        self.by_link.clear()
        for out in outs:
            self._fail(out, unknown(reason))

    def sender_closed(self, link: Any, condition: Any) -> None:
        out = self.by_link.pop(link, None)
        if out is None:
            return
        if self.outs.get(out.address) is out:
            del self.outs[out.address]
        reason = self._describe(condition)
        if not out.credited and condition is not None:
            # Refused at attach: no credit was ever granted, so nothing was transferred.
            self._fail(out, refused(f"the broker refused the link to {out.address!r}: {reason}"))
        else:
            self._fail(out, unknown(f"link to {out.address!r} closed before the broker answered: {reason}"))
