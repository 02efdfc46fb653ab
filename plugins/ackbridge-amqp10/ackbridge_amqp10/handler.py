"""proton's callbacks, all on the container thread; each hands over to the transport
(connection events), its receive side or its send side.

Conditions the peer sends (why a link, session or connection ended, why a
publish was rejected) are read with :mod:`ackbridge_amqp10.peer_text`, never
through proton's strict properties: a description that is not UTF-8 would
raise inside the handler that must report it. For the same reason proton's
endpoint-state handler is replaced by :class:`_EndpointState`, which decides
error/closing/closed from the tolerantly read condition.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from proton import Condition, Endpoint
from proton.handlers import EndpointStateHandler, MessagingHandler

from ackbridge_amqp10.links import close_link
from ackbridge_amqp10.peer_text import remote_condition, transport_condition

if TYPE_CHECKING:
    from ackbridge_amqp10.connection import Amqp10Transport


class _EndpointState(EndpointStateHandler):
    """proton's EndpointStateHandler with the remote condition read tolerantly."""

    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        if remote_condition(link):
            self.on_link_error(event)
        elif self.is_local_closed(link):
            self.on_link_closed(event)
        else:
            self.on_link_closing(event)
        link.close()

    def on_session_remote_close(self, event: Any) -> None:
        found = event.session
        if remote_condition(found):
            self.on_session_error(event)
        elif self.is_local_closed(found):
            self.on_session_closed(event)
        else:
            self.on_session_closing(event)
        found.close()

    def on_connection_remote_close(self, event: Any) -> None:
        conn = event.connection
        condition = remote_condition(conn)
        if condition:
            if condition.name == "amqp:connection:forced":
                return  # as proton: the transport closing follows (on_disconnected)
            self.on_connection_error(event)
        elif self.is_local_closed(conn):
            self.on_connection_closed(event)
        else:
            self.on_connection_closing(event)
        conn.close()


class Handler(MessagingHandler):
    """The transport's proton handler."""

    def __init__(self, transport: Amqp10Transport) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        # Only the endpoint-state child is kept. Deliveries are read in on_delivery
        # below: proton's incoming-message handler decoded them strictly and built a
        # new Link wrapper per read (delivery.link); its outgoing one read each
        # publish's state up to five times before calling on_accepted/on_settled.
        self.handlers = [_EndpointState(False, weakref.proxy(self))]
        self.t = transport

    def on_ackbridge_work(self, event: Any) -> None:  # the ApplicationEvent named container.WORK_EVENT
        self.t.container.run_work()

    def on_reactor_quiesced(self, event: Any) -> None:
        # Every event at hand was dispatched and the container is about to wait in
        # select (proton's IOHandler, the global handler, runs after this one): hand
        # the core this pass's deliveries and confirms in one burst (bursts.py).
        self.t.burst.flush()

    # -- connection
    def on_connection_opened(self, event: Any) -> None:
        self.t.opened(event.connection)

    def on_transport_error(self, event: Any) -> None:
        # Do not log here: MessagingHandler's default would print the condition unscrubbed.
        self.t.last_condition = transport_condition(event.transport)

    def on_disconnected(self, event: Any) -> None:
        self.t.failed(event.connection, transport_condition(event.transport) if event.transport else None)

    def on_connection_error(self, event: Any) -> None:
        conn = event.connection
        self.t.failed(conn, remote_condition(conn))
        conn.close()

    def on_connection_closing(self, event: Any) -> None:
        conn = event.connection
        self.t.failed(conn, remote_condition(conn) or Condition("amqp:connection:forced", "closed by the broker"))
        conn.close()

    def on_connection_closed(self, event: Any) -> None:
        self.t.connection_closed(event.connection)

    def on_session_closed(self, event: Any) -> None:
        # The broker answered our end: every frame we sent on the session before it was handled.
        self.t.receiving.ends.ended(event.session)

    def on_session_error(self, event: Any) -> None:
        self._session_gone(event)

    def on_session_closing(self, event: Any) -> None:
        self._session_gone(event)

    def _session_gone(self, event: Any) -> None:
        # One link per session (see links.session): the session's end is its link's end.
        ended = event.session
        self.t.receiving.ends.ended(ended)
        condition = remote_condition(ended) or Condition("amqp:session:ended", "session ended by the broker")
        receiving, sending = self.t.receiving, self.t.sending
        links = [*receiving.receivers, *receiving.inboxes, *self.t.wire.waiters, *sending.by_link]
        for link in {id(k): k for k in links if k.session == ended}.values():
            self._link_gone(link, condition)
        if not ended.state & Endpoint.LOCAL_CLOSED:
            ended.close()

    # -- links
    def on_link_opened(self, event: Any) -> None:
        link = event.link
        if link.is_receiver:
            if link in self.t.receiving.inboxes:
                self.t.receiving.inbox_attached(link)
                return
            if link.remote_source is None or (not link.remote_source.address and not link.remote_source.dynamic):
                return  # a null source means refused: the detach with its condition follows
        elif link.remote_target is None or not link.remote_target.address:
            return
        waiter = self.t.wire.waiters.pop(link, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if link.is_receiver:
            self.t.receiving.link_opened(link)

    def on_link_error(self, event: Any) -> None:
        self._link_gone(event.link, remote_condition(event.link))

    def on_link_closing(self, event: Any) -> None:
        self._link_gone(event.link, remote_condition(event.link))

    def _link_gone(self, link: Any, condition: Any) -> None:
        t = self.t
        waiter = t.wire.waiters.pop(link, None)
        if waiter is not None and not waiter.done():
            what = "source" if link.is_receiver else "target"
            address = link.source.address if link.is_receiver else link.target.address
            waiter.set_exception(t.broker_error(
                f"the broker refused the link to {what} {address!r}: {t.describe(condition)}"))
        if link.is_sender:
            t.sending.sender_closed(link, condition)
        else:
            t.receiving.inbox_gone(link, t.describe(condition))
            t.receiving.receiver_closed(link, condition)
        close_link(link)

    def on_link_closed(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            self.t.sending.sender_closed(link, None)
        else:
            self.t.receiving.receiver_closed(link, None)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if (link.is_sender and link.credit and link.state & Endpoint.LOCAL_ACTIVE
                and link.state & Endpoint.REMOTE_ACTIVE):
            self.t.sending.credited(link)

    # -- deliveries
    def on_delivery(self, event: Any) -> None:
        # event.link is the wrapper the event built already; delivery.link would be a new one.
        link = event.link
        delivery = event.delivery
        if link.is_sender:
            self.t.sending.outcome(delivery)
            return
        if delivery.aborted:
            delivery.settle()
            return
        if not delivery.readable or delivery.partial:
            return  # more of it to come
        raw = link.recv(delivery.pending)
        link.advance()
        if link.state & Endpoint.LOCAL_CLOSED:
            return  # a link we closed: left unsettled, as proton's own handler does
        self.t.receiving.transfer(link, delivery, raw)
