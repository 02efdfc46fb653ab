"""The ``mqtt://`` / ``mqtts://`` sync transport on paho-mqtt 2.2: its links and their life.

Layout: one :class:`~ackbridge_mqtt.link.Link` (one paho client) for
publishing and the reply inbox, plus one link per subscription, because in
MQTT the *session* (client id) is what holds unacked messages: a queue is a
topic (or topic filter) plus the persistent session subscribed to it. This
module opens and closes the links and reports generations; the parts do the
rest: :mod:`~ackbridge_mqtt.receiving` (subscriptions, deliveries,
settlement), :mod:`~ackbridge_mqtt.sending` (publishes, confirms, reply
inbox), :mod:`~ackbridge_mqtt.read_bursts` (confirms handed over once per paho
read), :mod:`~ackbridge_mqtt.queues` (topology verbs). asyncio is served by
the core's ``ThreadedAsyncTransport``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ackbridge.capabilities import Capabilities
from ackbridge.errors import ConnectionLostError
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_mqtt.capabilities import CAPABILITIES_V5, CAPABILITIES_V311
from ackbridge_mqtt.errors import TLSVerificationError
from ackbridge_mqtt.link import Link
from ackbridge_mqtt.options import OPTIONS, MqttSettings
from ackbridge_mqtt.queues import Queues
from ackbridge_mqtt.receiving import Receiving
from ackbridge_mqtt.requeued import RequeuedMemory
from ackbridge_mqtt.sending import Sending

__all__ = ["OPTIONS", "MqttTransport", "TLSVerificationError"]


class MqttTransport(SyncTransport):
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.mqtt = MqttSettings.resolve(url, options, self.settings)
        self.v5 = self.mqtt.v5
        self.capabilities: Capabilities = CAPABILITIES_V5 if self.v5 else CAPABILITIES_V311
        self._lock = threading.Lock()
        self._pub: Link | None = None
        self.requeued = RequeuedMemory()
        self.receiving = Receiving(self.mqtt, events, self._consumer_link)
        self.sending = Sending(self.mqtt, events, self.capabilities, self._publisher)
        self.queues = Queues(self.mqtt, url, self._short_link)

    def __repr__(self) -> str:
        return f"<MqttTransport {self.url.redacted} protocol={'5' if self.v5 else '3.1.1'}>"

    @property
    def generation(self) -> int:
        return max((link.generation for link in self.links()), default=0)

    def links(self) -> list[Link]:
        """Every paho client of this transport (the harness cuts or inspects them)."""
        with self._lock:
            pub = [self._pub] if self._pub else []
        return [*pub, *self.receiving.links()]

    # ---- making links ------------------------------------------------------------------
    def _new_link(self, role: str, client_id: str, *, clean: bool, receive_maximum: int | None = None,
                  topics: Sequence[str] = (), subscription: str = "", source: str = "") -> Link:
        expiry = 0 if clean else self.mqtt.session_expiry
        return Link(self.url, self.mqtt, self.events, self.requeued, role, client_id, clean=clean,
                    session_expiry=expiry, receive_maximum=receive_maximum, topics=topics,
                    subscription=subscription, source=source,
                    generation_ended=self.receiving.generation_ended if role == "consumer" else None)

    def _consumer_link(self, client_id: str, topics: Sequence[str], receive_maximum: int | None,
                       subscription: str, source: str) -> Link:
        return self._new_link("consumer", client_id, clean=False, receive_maximum=receive_maximum, topics=topics,
                              subscription=subscription, source=source)

    def _short_link(self, role: str, client_id: str, clean: bool, topics: Sequence[str]) -> Link:
        return self._new_link(role, client_id, clean=clean, topics=topics)

    def _publisher(self) -> Link:
        pub = self._pub
        if pub is None:
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        return pub

    # ---- the declared fault seam (TransportBase) ------------------------------------------
    def sever(self, reason: str) -> None:
        """Cut every link's socket; each generation ends before this returns."""
        for link in self.links():
            link.sever(reason)

    # ---- SyncTransport: lifecycle ----------------------------------------------------------
    def open(self) -> None:
        link = self._new_link("publisher", f"ab-pub-{uuid.uuid4().hex[:16]}", clean=True)
        link.start()
        with self._lock:
            self._pub = link

    def close(self) -> None:
        subs = self.receiving.take_all()
        with self._lock:
            pub, self._pub = self._pub, None
        for link in subs:
            link.stop()
        if pub is not None:
            pub.stop()

    # ---- SyncTransport: the parts' verbs ---------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Create the persistent session(s) that hold *name*'s messages (a topic or a
        topic filter) until consumed."""
        self.queues.declare(name, dead_letter=dead_letter)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self.queues.delete(name, dead_letter=dead_letter)

    def purge_queue(self, name: str) -> int | None:
        return self.queues.purge(name)

    def inspect_queue(self, name: str) -> QueueInfo:
        return self.queues.inspect(name)

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        """Consume *source*: a topic name, or a topic filter (``+``/``#``, the tables'
        ``source_patterns``) whose persistent session subscribes to the filter."""
        self.receiving.subscribe(subscription, source, prefetch=prefetch)

    def unsubscribe(self, subscription: str) -> None:
        self.receiving.unsubscribe(subscription)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        self.receiving.settle(ops)

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.sending.publish(seq, destination, message)

    def open_reply_inbox(self) -> str:
        return self.sending.open_reply_inbox()
