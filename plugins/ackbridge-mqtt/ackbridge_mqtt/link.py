"""One paho client: one MQTT session, its network thread and its settlement state.

A link runs paho's network loop on its own thread (``loop_start``) and lets
paho reconnect; each CONNACK starts a new generation (numbered across all
links, so a delivery's generation names exactly one connection).

Locking: every piece of a link's state is guarded by paho's own
``_out_message_mutex`` (an RLock). paho holds that lock while it calls
``on_publish``, so taking it around ``client.publish`` + recording the mid
closes the race where the PUBACK arrives before we know which publish it
answers, and taking it in ``settle`` keeps a PUBACK from crossing a reconnect
(the generation check and the write happen under the same lock that
``on_connect`` / ``on_disconnect`` take to change the generation).

Settlement: PUBACKs leave in receive order (the core's ``ordered_acks``).
A requeue or reject is a QoS 1 copy published first; the ops behind it wait
(``blocked_on``) until the broker has the copy, then the original is PUBACKed.
"""

from __future__ import annotations

import collections
import itertools
import logging
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from ackbridge.errors import BrokerError, ConnectionLostError
from ackbridge.kernel import backoff
from ackbridge.messages import CONFIRMED, ConfirmOutcome, InboundMessage, WireSettle, WireVerb, refused, unknown
from ackbridge.transport import TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_mqtt import codec
from ackbridge_mqtt.capabilities import MAX_RECEIVE_MAXIMUM
from ackbridge_mqtt.options import MqttSettings
from ackbridge_mqtt.requeued import RequeuedMemory
from ackbridge_mqtt.sessions import dead_letter_topic
from ackbridge_mqtt.tls import configure_tls, connect_error, refused_connect

log = logging.getLogger("ackbridge.mqtt")

#: MQTT 5 PUBACK reason code: accepted, but no subscription matched (nothing holds the message).
NO_MATCHING_SUBSCRIBERS = 0x10

_generations = itertools.count(1)
_generation_lock = threading.Lock()


def _next_generation() -> int:
    with _generation_lock:
        return next(_generations)


class LinkOwner(Protocol):
    """What a link needs from the transport that owns it."""

    url: BrokerURL
    mqtt: MqttSettings
    events: TransportEvents
    requeued: RequeuedMemory

    def consumer_generation_ended(self, link: Link, generation: int, reason: str) -> None: ...


class Link:
    """One paho client (one MQTT session) and its settlement state."""

    def __init__(self, owner: LinkOwner, role: str, client_id: str, *, clean: bool,
                 session_expiry: int, receive_maximum: int | None, topics: Sequence[str] = (),
                 subscription: str = "", source: str = "") -> None:
        self.owner = owner
        self.settings = settings = owner.mqtt
        self.role = role
        self.client_id = client_id
        self.subscription = subscription
        self.source = source
        self.topics = list(topics)
        self.v5 = settings.v5
        connection = settings.connection
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id,
            protocol=settings.protocol, clean_session=None if self.v5 else clean,
            manual_ack=True, reconnect_on_failure=connection.reconnect,
        )
        self.lock: threading.RLock = self.client._out_message_mutex  # see module docstring
        self.clean = clean
        self.props: Properties | None = None
        if self.v5:
            props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho leaves it untyped
            if session_expiry > 0:
                props.SessionExpiryInterval = session_expiry
            if receive_maximum is not None:
                # The core refuses a prefetch above the table's max_prefetch; the cap only
                # guards a transport driven directly.
                props.ReceiveMaximum = max(1, min(receive_maximum, MAX_RECEIVE_MAXIMUM))
            self.props = props
        self.generation = 0
        self.live = False
        self.closing = False
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.subscribed = threading.Event()
        self.connect_error: str | None = None
        self.connect_code: int | None = None
        self.max_packet: int | None = None
        #: The CONNACK's session-present flag of the latest connect (None before one).
        self.session_present: bool | None = None
        self.lost_before_connack: str | None = None
        self.subscribe_error: str | None = None
        self.pending: dict[int, int] = {}  # publish mid -> seq
        self.copies: dict[int, WireSettle] = {}  # copy mid -> the settlement it belongs to
        self.queue: collections.deque[WireSettle] = collections.deque()
        self.blocked_on: int | None = None
        self.qos_of: dict[int, int] = {}
        self._suback_mid: int | None = None
        #: Set by the UNSUBACK of close()'s barrier (see ``stop``).
        self.barrier_passed = threading.Event()
        c = self.client
        c.max_inflight_messages_set(settings.publish_inflight)
        # paho's own loop reconnects (reconnect_on_failure above = the `reconnect` option):
        # it doubles the wait from min_delay to max_delay and resets it after a CONNACK,
        # the schedule of ackbridge.kernel.backoff, so it gets the core's first delay and the
        # `reconnect_max_delay` option (paho adds no jitter).
        c.reconnect_delay_set(backoff.INITIAL_DELAY, connection.reconnect_max_delay)  # type: ignore[arg-type]
        url = owner.url
        if url.username is not None:
            c.username_pw_set(url.username, url.password_text)
        if settings.tls:
            configure_tls(c, connection, url)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe
        c.on_unsubscribe = self._on_unsubscribe

    # ---- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        s = self.settings
        url = self.owner.url
        timeout = s.connection.connect_timeout
        kwargs: dict[str, Any] = {"keepalive": s.keepalive}
        if self.v5:
            kwargs["clean_start"] = self.clean
            kwargs["properties"] = self.props
        try:
            self.client.connect(s.host, s.port, **kwargs)
        except OSError as exc:  # ssl.SSLError is an OSError too
            raise connect_error(exc, url) from None
        self.client.loop_start()
        if not self.connected.wait(timeout) or self.connect_error or self.lost_before_connack:
            reason = self.connect_error or self.lost_before_connack or f"no CONNACK within {timeout} s"
            self.stop(graceful=False)
            if self.connect_error:
                raise refused_connect(url, self.connect_code, reason)
            raise ConnectionLostError(f"{url.redacted}: {reason}")
        if self.topics:
            self.wait_subscribed()

    def wait_subscribed(self) -> None:
        url = self.owner.url
        timeout = self.settings.connection.connect_timeout
        if not self.subscribed.wait(timeout):
            self.stop(graceful=False)
            raise ConnectionLostError(f"{url.redacted}: no SUBACK within {timeout} s")
        if self.subscribe_error:
            error = self.subscribe_error
            self.stop(graceful=False)
            raise BrokerError(f"{url.redacted}: subscription refused: {error}")

    def drained(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if not self.live or (not self.queue and self.blocked_on is None):
                    return True
            time.sleep(0.01)
        return False

    def stop(self, *, graceful: bool = True) -> None:
        self.closing = True
        if graceful:
            self.drained(5.0)
            if self.role == "consumer":
                self._barrier(5.0)
        self.client.disconnect()
        self.disconnected.wait(5.0)
        self.client.loop_stop()
        self._end("closed")

    def _barrier(self, timeout: float) -> None:
        """Wait until the broker has read every PUBACK this link sent.

        A PUBACK has no answer, and paho closes the socket right after DISCONNECT.
        Mosquitto reads a connection's packets in order, but when a new connection
        with the same client id (the next consumer of this session) is read first, it
        closes the old one with its PUBACKs unread: those messages come back. One
        round trip first (UNSUBSCRIBE of a filter this link never subscribed, which
        leaves the session's subscriptions alone) puts every earlier PUBACK behind us.
        """
        with self.lock:
            if not self.live:
                return
        self.barrier_passed.clear()
        sent, _ = self.client.unsubscribe(f"ackbridge/close-barrier/{uuid.uuid4().hex}")  # never subscribed
        if sent == MQTTErrorCode.MQTT_ERR_SUCCESS and not self.barrier_passed.wait(timeout):
            log.warning("ackbridge-mqtt: closing %s: no answer from the broker within %.0f s; the last "
                        "acknowledgements may not have reached it (those messages would be delivered again)",
                        self.client_id, timeout)
        # Not sent: not connected any more, so nothing was waiting to be read.

    def sever(self, reason: str) -> None:
        """Cut the socket as a network fault would: the generation ends now, and
        paho reconnects (when ``reconnect`` is on) as after a real loss."""
        with self.lock:
            if not self.live:
                return
            sock = self.client.socket()
            if isinstance(sock, socket.socket):  # an SSLSocket is one too
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already gone: paho notices the loss by itself
        self._end(f"severed: {reason}")

    def lost(self, why: str) -> None:
        """paho found no connection while sending: end the generation now rather than
        at its ``on_disconnect``, which comes later. Until then every publish would be
        answered NO_CONN and join paho's queue, which paho sends after its reconnect;
        from now on a publish resolves unsent instead and is never sent behind our back."""
        self._end(why)

    def subscribe_topic(self, topic: str) -> None:
        with self.lock:
            self.topics.append(topic)
            self.subscribed.clear()
            self._send_subscribe([topic])
        self.wait_subscribed()

    def _send_subscribe(self, topics: Sequence[str]) -> None:
        qos = self.settings.qos
        if self.v5:
            _rc, mid = self.client.subscribe([(t, SubscribeOptions(qos=qos)) for t in topics])
        else:
            _rc, mid = self.client.subscribe([(t, qos) for t in topics])
        self._suback_mid = mid

    # ---- paho callbacks (paho's thread) ---------------------------------------------
    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode,
                    properties: Properties | None) -> None:
        if reason.is_failure:
            self.connect_error = f"{reason.getName()} ({reason.value:#04x})"
            self.connect_code = reason.value
            self.connected.set()
            # A refused CONNECT (bad credentials, banned id) will not heal by retrying.
            client.disconnect()
            return
        self.session_present = bool(getattr(flags, "session_present", False))
        # MQTT 5: a PUBLISH over the broker's Maximum Packet Size ends the connection
        # (Mosquitto: message_size_limit), so the transport refuses it before sending.
        self.max_packet = getattr(properties, "MaximumPacketSize", None) if properties is not None else None
        with self.lock:
            self.generation = _next_generation()
            self.live = True
            self.disconnected.clear()
            if self.topics:
                # Re-subscribe on every connect: harmless when the session kept the
                # subscription, necessary when it expired.
                self._send_subscribe(self.topics)
        self.connected.set()

    def _on_subscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: list[ReasonCode],
                      properties: Properties | None) -> None:
        failed = [r for r in reasons if r.is_failure]
        if failed:
            self.subscribe_error = ", ".join(f"{r.getName()} ({r.value:#04x})" for r in failed)
        self.subscribed.set()

    def _on_unsubscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: list[ReasonCode],
                        properties: Properties | None) -> None:
        self.barrier_passed.set()  # the link unsubscribes only for the close barrier

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode,
                       properties: Properties | None) -> None:
        if not self.connected.is_set():
            # Dropped before the first CONNACK: fail the connect now rather than at
            # connect_timeout. A TLS 1.3 broker refuses a missing client certificate so.
            hint = " (does the broker require a client certificate? see tls_cert_file)" if self.settings.tls else ""
            self.lost_before_connack = f"the broker closed the connection before CONNACK{hint}"
            self.connected.set()
        self._end(f"disconnected: {reason.getName()}")
        self.disconnected.set()

    def _end(self, why: str) -> None:
        with self.lock:
            if not self.live:
                return
            self.live = False
            old = self.generation
            lost = list(self.pending.values())
            self.pending.clear()
            self.copies.clear()
            self.queue.clear()
            self.blocked_on = None
            self.qos_of.clear()
        if lost:
            outcome = unknown(f"connection lost before the broker answered ({why})")
            self.owner.events.confirm_batch([(seq, outcome) for seq in lost])
        if self.role == "consumer":
            self.owner.consumer_generation_ended(self, old, why)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: ReasonCode,
                    properties: Properties | None) -> None:
        # paho holds self.lock (its _out_message_mutex) while calling this. 0x10 "No matching
        # subscribers" is a success code in MQTT 5, but no subscription and no persistent
        # session holds the message: it went nowhere, as an unroutable publish does on
        # RabbitMQ. Mosquitto answers so for the sessions it restored after a restart until
        # their clients subscribe again (the scoreboard's broker-restart row lost such
        # messages while they were counted confirmed).
        ok = not (self.v5 and (reason.is_failure or reason.value == NO_MATCHING_SUBSCRIBERS))
        seq = self.pending.pop(mid, None)
        if seq is not None:
            outcome: ConfirmOutcome = CONFIRMED if ok else refused(
                f"broker answered PUBACK {reason.getName()} ({reason.value:#04x})")
            self.owner.events.confirm(seq, outcome)
            return
        op = self.copies.pop(mid, None)
        if op is None or self.blocked_on != mid:
            return  # a resend from an earlier generation: already reported unknown
        self.blocked_on = None
        if self.queue and self.queue[0] is op:
            self.queue.popleft()
        if ok:
            self.ack(op)
        else:
            # Without the copy the original must stay on the broker: no PUBACK, so
            # the session redelivers it after the next reconnect.
            log.warning("%s: %s copy refused by the broker (%s); message left unacked for redelivery",
                        self.owner.url.redacted, op.verb.value, reason.getName())
        self.drain()

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        if not self.live:
            # Read after sever() ended the generation: never PUBACKed, so the broker redelivers it.
            return
        v5 = self.v5
        decoded = codec.decode_properties(msg.properties) if v5 else codec.Decoded()
        dup = bool(msg.dup)
        topic = msg.topic  # a property that decodes the topic bytes on every read
        body = msg.payload if type(msg.payload) is bytes else bytes(msg.payload)
        count: int | None = None
        if v5:
            count = decoded.attempt + 1 + (1 if dup else 0)
        requeued = not v5 and self.owner.requeued.take(topic, body)
        inbound = InboundMessage(
            wire_tag=msg.mid, generation=self.generation, body=body,
            source=self.source or topic, headers=decoded.headers, routing_key=topic,
            message_id=decoded.message_id, correlation_id=decoded.correlation_id, reply_to=decoded.reply_to,
            content_type=decoded.content_type, timestamp=decoded.timestamp,
            redelivered=dup or decoded.attempt > 0 or requeued, delivery_count=count,
        )
        events = self.owner.events
        if self.role == "consumer":
            if msg.qos > 0:
                # No lock: a dict store is atomic, and taking self.lock here would make
                # paho's thread wait while an application thread writes a PUBACK.
                self.qos_of[msg.mid] = msg.qos
            events.deliver(self.subscription, inbound)
        else:
            # Reply inbox: replies are fire-and-forget, acknowledge on receipt.
            events.reply(inbound)
            if msg.qos > 0:
                client.ack(msg.mid, msg.qos)

    # ---- settlement (lock held) ---------------------------------------------------------
    def drain(self) -> None:
        while self.queue and self.blocked_on is None:
            op = self.queue[0]
            if op.verb is WireVerb.ACK:
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
            self.client.ack(mid, qos)

    def _publish_copy(self, op: WireSettle) -> int | None:
        s = self.settings
        message = op.message
        assert message is not None, "requeue/reject ops carry the original message"
        topic = message.routing_key or message.source
        if op.verb is WireVerb.REJECT:
            target = dead_letter_topic(s.dead_letter_template, topic)
        else:
            target = s.retry_target(topic)
        props = None
        if self.v5:
            extra = {codec.ATTEMPT_KEY: str(message.delivery_count or 1)}
            if op.verb is WireVerb.REJECT:
                extra[codec.DEAD_LETTERED_FROM_KEY] = topic
            props = codec.publish_properties(
                headers=message.headers, message_id=message.message_id, correlation_id=message.correlation_id,
                reply_to=message.reply_to, content_type=message.content_type, timestamp=message.timestamp,
                extra=extra,
            )
        if not self.v5 and op.verb is WireVerb.REQUEUE:
            self.owner.requeued.remember(target, message.body)
        # Always QoS 1: the original is PUBACKed only once the broker has the copy.
        info = self.client.publish(target, message.body, qos=1, properties=props)
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return None
        return info.mid
