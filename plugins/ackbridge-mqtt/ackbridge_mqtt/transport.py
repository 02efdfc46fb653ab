"""The ``mqtt://`` / ``mqtts://`` sync transport on paho-mqtt 2.2.

Layout: one :class:`~ackbridge_mqtt.link.Link` (one paho client) for
publishing and the reply inbox, plus one link per subscription, because in
MQTT the *session* (client id) is what holds unacked messages: a queue is a
topic plus the persistent session subscribed to it. This module maps the
core's operations onto those links; the links own paho and the wire state.
asyncio is served by the core's ``ThreadedAsyncTransport``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode

from ackbridge.capabilities import Capabilities, Verb
from ackbridge.errors import BrokerError, ConnectionLostError, InvalidOptionError
from ackbridge.kernel.generations import check_generation, check_ops, stale_error
from ackbridge.messages import (
    ConfirmOutcome,
    OutboundMessage,
    QueueInfo,
    WireSettle,
    WireVerb,
    refused,
    unknown,
    unsent,
)
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.transport.text import CheckedOnce
from ackbridge.urls import BrokerURL
from ackbridge_mqtt import codec, limits
from ackbridge_mqtt.capabilities import CAPABILITIES_V5, CAPABILITIES_V311
from ackbridge_mqtt.link import Link
from ackbridge_mqtt.options import OPTIONS, MqttSettings
from ackbridge_mqtt.requeued import RequeuedMemory
from ackbridge_mqtt.sessions import check_topic_name, consumer_session_id, dead_letter_topic, derived_session_id
from ackbridge_mqtt.tls import TLSVerificationError

log = logging.getLogger("ackbridge.mqtt")

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
        self._subs: dict[str, Link] = {}
        self._inbox: str | None = None
        self._check_topic = CheckedOnce(check_topic_name)
        self._opened_subs = 0
        self.requeued = RequeuedMemory()

    def __repr__(self) -> str:
        return f"<MqttTransport {self.url.redacted} protocol={'5' if self.v5 else '3.1.1'}>"

    @property
    def generation(self) -> int:
        return max((link.generation for link in self.links()), default=0)

    def links(self) -> list[Link]:
        """Every paho client of this transport (the harness cuts or inspects them)."""
        with self._lock:
            return [*([self._pub] if self._pub else []), *self._subs.values()]

    # ---- called by links --------------------------------------------------------------
    def consumer_generation_ended(self, link: Link, generation: int, reason: str) -> None:
        # The core ends every ledger whose generation is <= the one reported, so only
        # report when no other live subscription is older; otherwise the ledger learns
        # it from the next delivery and settle() refuses the stale ops.
        with self._lock:
            others = [s.generation for s in self._subs.values() if s is not link and s.live]
        if all(g > generation for g in others):
            self.events.generation_ended(generation, reason)

    def _new_link(self, role: str, client_id: str, *, clean: bool, receive_maximum: int | None = None,
                  topics: Sequence[str] = (), subscription: str = "", source: str = "") -> Link:
        expiry = 0 if clean else self.mqtt.session_expiry
        return Link(self, role, client_id, clean=clean, session_expiry=expiry, receive_maximum=receive_maximum,
                    topics=topics, subscription=subscription, source=source)

    def _publisher(self) -> Link:
        if self._pub is None:
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        return self._pub

    # ---- fault seam (ackbridge.testing.faults) ------------------------------------------
    def sever(self, reason: str) -> None:
        """Cut every link's socket; each generation ends before this returns."""
        for link in self.links():
            link.sever(reason)

    # ---- SyncTransport -------------------------------------------------------------------
    def open(self) -> None:
        link = self._new_link("publisher", f"ab-pub-{uuid.uuid4().hex[:16]}", clean=True)
        link.start()
        self._pub = link

    def close(self) -> None:
        with self._lock:
            subs = list(self._subs.values())
            self._subs.clear()
            pub, self._pub = self._pub, None
        for link in subs:
            link.stop()
        if pub is not None:
            pub.stop()

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Create the persistent session(s) that hold *name*'s messages until consumed."""
        self._ensure_session(consumer_session_id(name, self.mqtt.client_id), name)
        if dead_letter:
            dlq = dead_letter_topic(self.mqtt.dead_letter_template, name)
            self._ensure_session(derived_session_id(dlq), dlq)

    def _sessions(self, name: str, dead_letter: bool) -> list[tuple[str, str]]:
        """(session id, topic) pairs that hold *name* (and its dead-letter topic)."""
        found = [(consumer_session_id(name, self.mqtt.client_id), name)]
        if dead_letter:
            dlq = dead_letter_topic(self.mqtt.dead_letter_template, name)
            found.append((derived_session_id(dlq), dlq))
        return found

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """End the persistent session(s) of *name*: a clean connect discards the stored
        session and the new one ends when it disconnects (its queued messages go)."""
        for session, _topic in self._sessions(name, dead_letter):
            self._clean_connect(session)

    def purge_queue(self, name: str) -> int | None:
        """Emulated: the session is ended and created again, empty (MQTT cannot drop
        queued messages otherwise). The broker does not say how many went."""
        session, topic = self._sessions(name, False)[0]
        self._clean_connect(session)
        self._ensure_session(session, topic)
        return None

    def inspect_queue(self, name: str) -> QueueInfo:
        """Whether *name* has a persistent session (the CONNACK's session-present flag);
        MQTT tells no depth or consumers. Raises BrokerError when it has none."""
        (session, _topic), (dlq_session, dlq) = self._sessions(name, True)
        if not self._session_present(session):
            raise BrokerError(
                f"MQTT topic {name!r} has no persistent session on {self.url.redacted}: messages published "
                "to it are kept for nobody (declare the queue, or subscribe once, first)")
        return QueueInfo(name, dead_letter=dlq if self._session_present(dlq_session) else None)

    def _session_present(self, session: str) -> bool:
        link = self._new_link("inspect", session, clean=False)
        link.start()
        present = bool(link.session_present)
        link.stop(graceful=True)
        if not present:
            self._clean_connect(session)  # the look created an empty session: take it away again
        return present

    def _clean_connect(self, session: str) -> None:
        link = self._new_link("delete", session, clean=True)
        link.start()
        link.stop(graceful=True)

    def _ensure_session(self, session: str, topic: str) -> None:
        link = self._new_link("declare", session, clean=False, topics=[topic])
        link.start()
        link.stop(graceful=False)

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        with self._lock:
            index = self._opened_subs
            self._opened_subs += 1
        self._warn_limits(source, prefetch)
        topics = [source]
        retry = self.mqtt.retry_target(source)
        if retry != source:
            topics.append(retry)
        link = self._new_link("consumer", consumer_session_id(source, self.mqtt.client_id, index), clean=False,
                              receive_maximum=prefetch if self.v5 else None, topics=topics,
                              subscription=subscription, source=source)
        with self._lock:
            self._subs[subscription] = link
        try:
            link.start()
        except BaseException:
            with self._lock:
                self._subs.pop(subscription, None)
            raise

    def _warn_limits(self, source: str, prefetch: int) -> None:
        """Warn at subscribe time when the session's settings let the broker drop
        (documented Mosquitto limits: ackbridge_mqtt.limits)."""
        mqtt = self.mqtt
        backlog = mqtt.expected_backlog
        assumed = backlog if backlog is not None else mqtt.broker_max_queued + 1
        warnings = limits.check_settings(prefetch, 1, protocol="5" if self.v5 else "3.1.1", expected_backlog=assumed,
                                         broker_max_queued=mqtt.broker_max_queued, acks_held_until_commit=False)
        for warning in warnings:
            if backlog is None and "expected_backlog" in warning:
                warning = (f"the persistent session of {source!r} keeps at most max_queued_messages="
                           f"{mqtt.broker_max_queued} messages while this consumer is offline; Mosquitto DROPS the "
                           "rest silently and still PUBACKs the publisher. Raise max_queued_messages in "
                           "mosquitto.conf and say so with broker_max_queued=, or give expected_backlog= (and use "
                           "publisher(sequence=True) with consume(on_gap=...) to detect a loss)")
            log.warning("ackbridge-mqtt: %s", warning)

    def unsubscribe(self, subscription: str) -> None:
        # Disconnect only: an MQTT UNSUBSCRIBE would stop the session queuing the topic.
        with self._lock:
            link = self._subs.pop(subscription, None)
        if link is not None:
            link.stop()

    def settle(self, ops: Sequence[WireSettle]) -> None:
        if len(ops) == 1 and ops[0].verb is WireVerb.ACK and self._ack_now(ops[0]):
            return
        first = ops[0].subscription if ops else ""
        if all(op.subscription == first for op in ops):
            # The per-message path: one subscription (the core settles per consumer).
            self._settle_on(first, ops)
            return
        by_sub: dict[str, list[WireSettle]] = {}
        for op in ops:
            by_sub.setdefault(op.subscription, []).append(op)
        for subscription, group in by_sub.items():
            self._settle_on(subscription, group)

    def _ack_now(self, op: WireSettle) -> bool:
        """The per-message path: one ack with nothing queued ahead of it goes
        straight to paho. False: take the general path (which also reports why
        an op cannot be sent)."""
        link = self._subs.get(op.subscription)
        if link is None:
            return False
        with link.lock:
            if not link.live or op.generation != link.generation or link.queue or link.blocked_on is not None:
                return False
            link.ack(op)
        return True

    def _settle_on(self, subscription: str, group: Sequence[WireSettle]) -> None:
        if not group:
            return
        # dict.get is atomic under the GIL; the link's own lock guards its state.
        link = self._subs.get(subscription)
        if link is None:
            raise stale_error(f"{len(group)} settlement(s) on closed subscription {subscription}",
                              group[0].generation)
        with link.lock:
            if not link.live:
                check_generation(group[0].generation, None, f"{len(group)} settlement(s) on a link that is down")
            check_ops(group, link.generation)
            link.queue.extend(group)
            link.drain()

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        link = self._publisher()
        try:
            self._check_topic(destination)
        except InvalidOptionError as exc:
            # Mosquitto drops the connection on such a topic and paho resends the
            # PUBLISH on every reconnect: it must never reach paho.
            self.events.confirm(seq, refused(f"not sent: {exc}"))
            return
        if not self.v5 and message.headers:
            raise InvalidOptionError("MQTT 3.1.1 cannot carry headers (no user properties); use protocol=5")
        outcome: ConfirmOutcome | None = None
        gone = False
        props = None
        # A bare body needs no properties: skipping them keeps the hot path as cheap as raw paho.
        if self.v5 and (message.headers or message.message_id or message.correlation_id or message.reply_to
                        or message.content_type or message.timestamp is not None):
            props = codec.publish_properties(
                headers=message.headers, message_id=message.message_id, correlation_id=message.correlation_id,
                reply_to=message.reply_to, content_type=message.content_type, timestamp=message.timestamp)
        qos = self.mqtt.qos
        too_big = codec.over_packet_limit(link.max_packet, destination, message.body, props)
        if too_big is not None:
            self.events.confirm(seq, refused(too_big))
            return
        with link.lock:
            if not link.live:
                outcome = unsent("not connected to the broker (reconnecting); the message was not sent")
            else:
                try:
                    info = link.client.publish(destination, message.body, qos=qos, properties=props)
                except ValueError as exc:  # invalid topic or payload: nothing went out
                    outcome = refused(f"paho refused the publish: {exc}")
                else:
                    if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
                        # paho keeps it and sends it after its reconnect: unknown, not unsent.
                        outcome = unknown("connection lost while publishing (paho sends it after reconnecting)")
                        gone = True
                    elif info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                        outcome = unknown(f"paho could not queue the publish: {paho.error_string(info.rc)}")
                    elif qos == 0:
                        outcome = unknown("QoS 0 publishes are never acknowledged")
                    else:
                        link.pending[info.mid] = seq
        if gone:
            link.lost("connection lost while publishing")
        if outcome is not None:
            self.events.confirm(seq, outcome)

    def open_reply_inbox(self) -> str:
        if not self.capabilities.support(Verb.LABELLED_ACKS).available:
            # The core opens the inbox before it validates labels and checks the capability;
            # raising here would hide InvalidLabelError. The core's own require() raises the
            # UnsupportedVerbError right after, before anything is published.
            return "ackbridge/reply/unsupported"
        with self._lock:
            if self._inbox is not None:
                return self._inbox
        inbox = f"ackbridge/reply/{uuid.uuid4().hex}"
        self._publisher().subscribe_topic(inbox)
        with self._lock:
            self._inbox = inbox
        return inbox
