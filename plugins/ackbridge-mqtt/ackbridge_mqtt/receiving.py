"""The receive side: subscriptions, deliveries to the core and their settlement.

:class:`Receiving` is the transport's part: one consumer link (one persistent
session) per subscription, settlements routed to the link that received them.
:class:`Receiver` is a link's part: it turns a PUBLISH into a delivery and puts
settlements on the wire.

Settlement: PUBACKs leave in receive order (the core's ``ordered_acks``).
A requeue or reject is a QoS 1 copy published first; the ops behind it wait
(``blocked_on``) until the broker has the copy, then the original is PUBACKed.
Everything of a :class:`Receiver` but :meth:`Receiver.message` runs with its
link's lock held.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

from ackbridge.kernel.generations import check_ops
from ackbridge.messages import ACK, REJECT, REQUEUE, InboundMessage, WireSettle
from ackbridge.transport import TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_mqtt import codec, limits
from ackbridge_mqtt.options import MqttSettings
from ackbridge_mqtt.requeued import RequeuedMemory
from ackbridge_mqtt.sending import publish_accepted
from ackbridge_mqtt.sessions import check_source, consumer_session_id, dead_letter_topic

if TYPE_CHECKING:
    from ackbridge_mqtt.link import Link

log = logging.getLogger("ackbridge.mqtt")

#: Makes a consumer link: (client id, topics, receive maximum, subscription, source).
NewConsumerLink = Callable[[str, Sequence[str], "int | None", str, str], "Link"]


class Receiver:
    """A link's deliveries and their settlement state."""

    def __init__(self, client: paho.Client, settings: MqttSettings, events: TransportEvents,
                 requeued: RequeuedMemory, url: BrokerURL, *, role: str, subscription: str, source: str) -> None:
        self._client = client
        self._settings = settings
        self._events = events
        self._requeued = requeued
        self._url = url
        self._consumer = role == "consumer"
        #: The publisher link's clean session, where the reply inbox is subscribed.
        self._reply_inbox = role == "publisher"
        self._subscription = subscription
        self._source = source
        self._v5 = settings.v5
        self.copies: dict[int, WireSettle] = {}  # copy mid -> the settlement it belongs to
        self.queue: collections.deque[WireSettle] = collections.deque()
        self.blocked_on: int | None = None
        self.qos_of: dict[int, int] = {}

    @property
    def idle(self) -> bool:
        """Nothing waits to go out."""
        return not self.queue and self.blocked_on is None

    def clear(self) -> None:
        """The generation ended: what it held is void (the broker redelivers)."""
        self.copies.clear()
        self.queue.clear()
        self.blocked_on = None
        self.qos_of.clear()

    # ---- deliveries (paho's thread) -------------------------------------------------
    def message(self, msg: paho.MQTTMessage, generation: int) -> None:
        v5 = self._v5
        decoded = codec.decode_properties(msg.properties) if v5 else codec.Decoded()
        dup = bool(msg.dup)
        topic = msg.topic  # a property that decodes the topic bytes on every read
        body = msg.payload if type(msg.payload) is bytes else bytes(msg.payload)
        count: int | None = None
        if v5:
            count = decoded.attempt + 1 + (1 if dup else 0)
        requeued = not v5 and self._requeued.take(topic, body)
        inbound = InboundMessage(
            wire_tag=msg.mid, generation=generation, body=body,
            source=self._source or topic, headers=decoded.headers, routing_key=topic,
            message_id=decoded.message_id, correlation_id=decoded.correlation_id, reply_to=decoded.reply_to,
            content_type=decoded.content_type, timestamp=decoded.timestamp,
            redelivered=dup or decoded.attempt > 0 or requeued, delivery_count=count,
        )
        if self._consumer:
            if msg.qos > 0:
                # No lock: a dict store is atomic, and taking the link's lock here would make
                # paho's thread wait while an application thread writes a PUBACK.
                self.qos_of[msg.mid] = msg.qos
            self._events.deliver(self._subscription, inbound)
        elif self._reply_inbox:
            # Reply inbox: replies are fire-and-forget, acknowledge on receipt.
            self._events.reply(inbound)
            if msg.qos > 0:
                self._client.ack(msg.mid, msg.qos)
        # Else a short look at a persistent session (inspect, declare): the broker hands it what
        # the session holds, and a PUBACK here would lose it. Unacknowledged, it stays in the
        # session and comes back to the session's next consumer (a redelivery).

    # ---- settlement (lock held) ---------------------------------------------------------
    def settle(self, ops: Sequence[WireSettle]) -> None:
        self.queue.extend(ops)
        self.drain()

    def drain(self) -> None:
        while self.queue and self.blocked_on is None:
            op = self.queue[0]
            if op.verb is ACK:
                self.queue.popleft()
                self.ack(op)
                continue
            mid = self._publish_copy(op)
            if mid is None:
                return  # not connected: on_disconnect has cleared the queue
            self.copies[mid] = op
            self.blocked_on = mid

    def ack(self, op: WireSettle) -> None:
        mid = int(op.wire_tag)  # type: ignore[call-overload]
        qos = self.qos_of.pop(mid, 0)
        if qos:
            self._client.ack(mid, qos)

    def copy_answered(self, mid: int, reason: ReasonCode) -> None:
        """The broker answered the PUBLISH of a requeue/reject copy (paho holds the lock)."""
        op = self.copies.pop(mid, None)
        if op is None or self.blocked_on != mid:
            return  # a resend from an earlier generation: already reported unknown
        self.blocked_on = None
        if self.queue and self.queue[0] is op:
            self.queue.popleft()
        if publish_accepted(reason, self._v5):
            self.ack(op)
        else:
            # Without the copy the original must stay on the broker: no PUBACK, so
            # the session redelivers it after the next reconnect.
            log.warning("%s: %s copy refused by the broker (%s); message left unacked for redelivery",
                        self._url.redacted, op.verb.value, reason.getName())
        self.drain()

    def _publish_copy(self, op: WireSettle) -> int | None:
        s = self._settings
        message = op.message
        assert message is not None, "requeue/reject ops carry the original message"
        topic = message.routing_key or message.source
        if op.verb is REJECT:
            target = dead_letter_topic(s.dead_letter_template, topic)
        else:
            target = s.retry_target(topic)
        props = None
        if self._v5:
            extra = {codec.ATTEMPT_KEY: str(message.delivery_count or 1)}
            if op.verb is REJECT:
                extra[codec.DEAD_LETTERED_FROM_KEY] = topic
            props = codec.publish_properties(
                headers=message.headers, message_id=message.message_id, correlation_id=message.correlation_id,
                reply_to=message.reply_to, content_type=message.content_type, timestamp=message.timestamp,
                extra=extra,
            )
        if not self._v5 and op.verb is REQUEUE:
            self._requeued.remember(target, message.body)
        # Always QoS 1: the original is PUBACKed only once the broker has the copy.
        info = self._client.publish(target, message.body, qos=1, properties=props)
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return None
        return info.mid


class Receiving:
    """The transport's subscriptions: one consumer link (persistent session) each.

    A source is a topic name or, declared as the tables' ``source_patterns``, a
    topic filter (``+`` / ``#``): its session subscribes to the filter
    (:func:`ackbridge_mqtt.sessions.session_topic` names that session)."""

    def __init__(self, settings: MqttSettings, events: TransportEvents, new_link: NewConsumerLink) -> None:
        self._settings = settings
        self._events = events
        self._new_link = new_link
        self._lock = threading.Lock()
        self.subs: dict[str, Link] = {}
        #: Sources whose "Mosquitto may drop an offline backlog" warning this connection gave.
        self._warned_backlog: set[str] = set()
        self._opened = 0

    def links(self) -> list[Link]:
        with self._lock:
            return list(self.subs.values())

    def take_all(self) -> list[Link]:
        with self._lock:
            subs = list(self.subs.values())
            self.subs.clear()
        return subs

    def generation_ended(self, link: Link, generation: int, reason: str) -> None:
        # The core ends every ledger whose generation is <= the one reported, so only
        # report when no other live subscription is older; otherwise the ledger learns
        # it from the next delivery and settle() refuses the stale ops.
        with self._lock:
            others = [s.generation for s in self.subs.values() if s is not link and s.live]
        if all(g > generation for g in others):
            self._events.generation_ended(generation, reason)

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        check_source(source)
        with self._lock:
            index = self._opened
            self._opened += 1
        settings = self._settings
        self._warn_limits(source, prefetch)
        topics = [source]
        retry = settings.retry_target(source)
        if retry != source:
            topics.append(retry)
        link = self._new_link(consumer_session_id(source, settings.client_id, index), topics,
                              prefetch if settings.v5 else None, subscription, source)
        with self._lock:
            self.subs[subscription] = link
        try:
            link.start()
        except BaseException:
            with self._lock:
                self.subs.pop(subscription, None)
            raise

    def _warn_limits(self, source: str, prefetch: int) -> None:
        """Warn at subscribe time when the session's settings let the broker drop
        (documented Mosquitto limits: ackbridge_mqtt.limits)."""
        s = self._settings
        backlog = s.expected_backlog
        assumed = backlog if backlog is not None else s.broker_max_queued + 1
        warnings = limits.check_settings(prefetch, 1, protocol="5" if s.v5 else "3.1.1", expected_backlog=assumed,
                                         broker_max_queued=s.broker_max_queued, acks_held_until_commit=False)
        for warning in warnings:
            if backlog is None and "expected_backlog" in warning:
                # Said once per source and connection: a consumer re-made in a loop (a batch
                # job, the Spark source per batch) repeated it every time (docs/brokers/mqtt.md).
                if source in self._warned_backlog:
                    continue
                self._warned_backlog.add(source)
                warning = (f"{source!r}: while no consumer is connected, Mosquitto keeps at most "
                           f"max_queued_messages={s.broker_max_queued} messages for it and DROPS the rest (still "
                           "PUBACKing the publisher); set broker_max_queued= and expected_backlog= to say how "
                           "yours is configured (docs/brokers/mqtt.md)")
            log.warning("ackbridge-mqtt: %s", warning)

    def unsubscribe(self, subscription: str) -> None:
        # Disconnect only: an MQTT UNSUBSCRIBE would stop the session queuing the topic.
        with self._lock:
            link = self.subs.pop(subscription, None)
        if link is not None:
            link.stop()

    def settle(self, ops: Sequence[WireSettle]) -> None:
        if len(ops) == 1 and ops[0].verb is ACK and self._ack_now(ops[0]):
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
        link = self.subs.get(op.subscription)
        if link is None:
            return False
        with link.lock:
            if not link.live or op.generation != link.generation or not link.receiver.idle:
                return False
            link.receiver.ack(op)
        return True

    def _settle_on(self, subscription: str, group: Sequence[WireSettle]) -> None:
        if not group:
            return
        # dict.get is atomic under the GIL; the link's own lock guards its state.
        link = self.subs.get(subscription)
        if link is None:
            check_ops(group, None, f"on closed subscription {subscription}")
            return
        with link.lock:
            check_ops(group, link.generation if link.live else None, "on a link that is down")
            link.receiver.settle(group)
