"""A tiny AMQP 1.0 peer (a proton Container acting as a broker) on loopback.

It answers publishes by body: ``reject`` -> rejected (with a condition),
``release`` -> released, ``modify`` -> modified(undeliverable), anything else
-> accepted and queued. Queued messages are handed to receivers; a ``modified``
(delivery-failed) or ``released`` settlement puts the message back (modified
raises its header delivery-count), ``rejected`` moves it to ``dead`` (and its
condition to ``rejections``). :meth:`ToyPeer.enqueue_raw` queues a transfer's
bytes as given, e.g. a message whose strings are not valid UTF-8, which
proton's own Message cannot write.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import deque
from typing import Any

from proton import Condition, Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Peer(MessagingHandler):  # type: ignore[misc]
    def __init__(self, port: int, properties: dict[Any, Any]) -> None:
        super().__init__(prefetch=100, auto_accept=False, auto_settle=False)
        self.port = port
        self.properties = properties
        self.queue: deque[Message | bytes] = deque()
        self.dead: list[Message | bytes] = []
        self.rejections: list[Any] = []
        self.outstanding: dict[Any, Message | bytes] = {}
        self.senders: list[Any] = []
        self.dispositions: list[int] = []
        self.listening = threading.Event()

    def on_toy_stop(self, event: Any) -> None:
        self.container.stop()

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.acceptor = event.container.listen(f"127.0.0.1:{self.port}")
        self.listening.set()

    def on_connection_opening(self, event: Any) -> None:
        event.connection.properties = self.properties

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            self.senders.append(link)
        else:
            link.target.copy(link.remote_target)
            link.source.copy(link.remote_source)

    def on_sendable(self, event: Any) -> None:
        self._pump(event.sender)

    def _pump(self, sender: Any) -> None:
        while sender.credit and self.queue:
            message = self.queue.popleft()
            if isinstance(message, bytes):
                delivery = sender.delivery(sender.delivery_tag())
                sender.stream(message)
                sender.advance()
            else:
                delivery = sender.send(message)
            self.outstanding[delivery] = message

    def on_message(self, event: Any) -> None:
        body = bytes(event.message.body or b"")
        delivery = event.delivery
        if body == b"reject":
            delivery.local.condition = Condition("amqp:precondition-failed", "peer says no")
            delivery.update(Delivery.REJECTED)
        elif body == b"release":
            delivery.update(Delivery.RELEASED)
        elif body == b"modify":
            delivery.local.undeliverable = True
            delivery.update(Delivery.MODIFIED)
        else:
            message = event.message
            message.first_acquirer = True
            self.queue.append(message)
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        for sender in self.senders:
            self._pump(sender)

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if not delivery.link.is_sender or not delivery.updated:
            return
        message = self.outstanding.pop(delivery, None)
        if message is None:
            return
        state = delivery.remote_state
        self.dispositions.append(state)
        if state == Delivery.MODIFIED:
            if isinstance(message, Message):
                message.first_acquirer = False
                if delivery.remote.failed:
                    message.delivery_count += 1
            self.queue.appendleft(message)
        elif state == Delivery.RELEASED:
            self.queue.appendleft(message)
        elif state == Delivery.REJECTED:
            self.dead.append(message)
            self.rejections.append(delivery.remote.condition)
        delivery.settle()
        self._pump(delivery.link)


class ToyPeer:
    """Run the peer on its own thread; ``stop()`` ends it."""

    def __init__(self, properties: dict[Any, Any] | None = None) -> None:
        from proton import symbol

        props = properties or {symbol("product"): "toy-peer", symbol("version"): "1.0"}
        self.port = free_port()
        self.handler = _Peer(self.port, props)
        self.container = Container(self.handler)
        self.injector = EventInjector()
        self.container.selectable(self.injector)
        # Container.stop() ends run() without closing what it still selects on (the listening
        # socket, accepted connections' sockets), and run() drops its IO handler on the way
        # out, so keep the handler's selector to close those after the thread ends.
        overrides: Any = self.container.global_handler  # proton's GlobalOverrides around its IOHandler
        self._selector: Any = overrides.base._selector
        self.thread = threading.Thread(target=self.container.run, name="toy-peer", daemon=True)
        self.thread.start()
        if not self.handler.listening.wait(10):
            raise RuntimeError("toy peer did not start")

    def enqueue_raw(self, transfer: bytes) -> None:
        """Queue *transfer* (an encoded message) to be sent as given; call before a
        receiver attaches (the send happens when it grants credit)."""
        self.handler.queue.append(transfer)

    def stop(self) -> None:
        self.injector.trigger(ApplicationEvent("toy_stop"))
        self.thread.join(timeout=10)
        if self.thread.is_alive():
            raise RuntimeError("toy peer did not stop")
        for selectable in list(self._selector._selectables):
            selectable.close()
        # proton never closes the injector's pipe (EventInjector.close() only marks it closed).
        for fd in self.injector.pipe:
            os.close(fd)
