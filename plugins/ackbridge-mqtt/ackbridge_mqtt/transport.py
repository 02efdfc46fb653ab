"""The ``mqtt://`` / ``mqtts://`` transport on paho-mqtt 2.2.

Layout: one paho client ("link") for publishing and the reply inbox, plus one
link per subscription, because in MQTT the *session* (client id) is what holds
unacked messages: a queue is a topic plus the persistent session subscribed to
it. Each link runs paho's network loop on its own thread (``loop_start``).

Locking: every piece of a link's state is guarded by paho's own
``_out_message_mutex`` (an RLock). paho holds that lock while it calls
``on_publish``, so taking it around ``client.publish`` + recording the mid
closes the race where the PUBACK arrives before we know which publish it
answers, and taking it in ``settle`` keeps a PUBACK from crossing a reconnect
(the generation check and the write happen under the same lock that
``on_connect`` / ``on_disconnect`` take to change the generation).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import logging
import ssl
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from ackbridge.capabilities import Capabilities, Verb
from ackbridge.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionLostError,
    InvalidOptionError,
    InvalidURLError,
    StaleDeliveryError,
)
from ackbridge.messages import (
    CONFIRMED,
    ConfirmOutcome,
    InboundMessage,
    OutboundMessage,
    WireSettle,
    WireVerb,
    refused,
    unknown,
)
from ackbridge.options import OptionSpec, positive_int
from ackbridge.text import CheckedOnce
from ackbridge.transport import ThreadedAsyncSide, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_mqtt import codec
from ackbridge_mqtt.capabilities import CAPABILITIES_V5, CAPABILITIES_V311
from ackbridge_mqtt.sessions import (
    DEFAULT_DEAD_LETTER_TOPIC,
    check_topic_name,
    consumer_session_id,
    dead_letter_topic,
    derived_session_id,
)

log = logging.getLogger("ackbridge_mqtt")

_PROTOCOLS = {"5": MQTTProtocolVersion.MQTTv5, "5.0": MQTTProtocolVersion.MQTTv5,
              "3.1.1": MQTTProtocolVersion.MQTTv311, "311": MQTTProtocolVersion.MQTTv311}

OPTIONS = (
    OptionSpec("protocol", str, "5", "MQTT protocol version: '5' or '3.1.1'",
               lambda v: v in _PROTOCOLS, "must be '5' or '3.1.1'"),
    OptionSpec("client_id", str, None, "fixed client id of the consumer session (default: derived from the topic)",
               lambda v: 0 < len(v) <= 65535, "must be a non-empty string", nullable=True),
    positive_int("session_expiry", 3600, "seconds the broker keeps a disconnected consumer session (MQTT 5)"),
    OptionSpec("qos", int, 1, "QoS for subscriptions and publishes (1 = at-least-once)",
               lambda v: v in (0, 1, 2), "must be 0, 1 or 2"),
    OptionSpec("dead_letter_topic", str, DEFAULT_DEAD_LETTER_TOPIC,
               "where reject() publishes; '{topic}' is replaced by the message's topic",
               lambda v: bool(v) and "+" not in v and "#" not in v, "must be a topic name without wildcards"),
    OptionSpec("retry_topic", str, None, "where requeue() republishes ('{topic}' replaced); the consumer "
               "subscribes to it too. Default: the message's own topic", nullable=True),
    OptionSpec("tls_ca_file", str, None, "PEM file of the CA that signed the broker certificate (mqtts)",
               nullable=True),
    OptionSpec("tls_verify", bool, True, "verify the broker certificate and host name (mqtts); keep it on"),
    positive_int("keepalive", 30, "MQTT keepalive in seconds"),
    OptionSpec("connect_timeout", float, 10.0, "seconds to wait for CONNACK/SUBACK", lambda v: v > 0, "must be > 0"),
    positive_int("publish_inflight", 100, "unacknowledged outgoing QoS>0 publishes paho keeps on the wire"),
)


class TLSVerificationError(ConfigurationError):
    """The broker's TLS certificate could not be verified (not recoverable by retrying)."""


_generations = itertools.count(1)
_generation_lock = threading.Lock()


def _next_generation() -> int:
    # Unique across links, so a delivery's generation names exactly one connection.
    with _generation_lock:
        return next(_generations)


class _Link:
    """One paho client (one MQTT session) and its settlement state."""

    def __init__(self, transport: MqttTransport, role: str, client_id: str, *, clean: bool,
                 session_expiry: int, receive_maximum: int | None, topics: Sequence[str] = (),
                 subscription: str = "", source: str = "") -> None:
        self.transport = transport
        self.role = role
        self.client_id = client_id
        self.subscription = subscription
        self.source = source
        self.topics = list(topics)
        v5 = transport.v5
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id,
            protocol=transport.protocol, clean_session=None if v5 else clean,
            manual_ack=True, reconnect_on_failure=True,
        )
        self.lock: threading.RLock = self.client._out_message_mutex  # see module docstring
        self.clean = clean
        self.props: Properties | None = None
        if v5:
            props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho leaves it untyped
            if session_expiry > 0:
                props.SessionExpiryInterval = session_expiry
            if receive_maximum is not None:
                props.ReceiveMaximum = max(1, min(receive_maximum, 65535))
            self.props = props
        self.generation = 0
        self.live = False
        self.closing = False
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.subscribed = threading.Event()
        self.connect_error: str | None = None
        self.subscribe_error: str | None = None
        self.pending: dict[int, int] = {}  # publish mid -> seq
        self.copies: dict[int, WireSettle] = {}  # copy mid -> the settlement it belongs to
        self.queue: collections.deque[WireSettle] = collections.deque()
        self.blocked_on: int | None = None
        self.qos_of: dict[int, int] = {}
        self._suback_mid: int | None = None
        c = self.client
        c.max_inflight_messages_set(transport.publish_inflight)
        c.reconnect_delay_set(1, 10)
        if transport.url.username is not None:
            c.username_pw_set(transport.url.username, transport.url.password_text)
        if transport.tls:
            transport.configure_tls(c)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe

    # ---- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        t = self.transport
        kwargs: dict[str, Any] = {"keepalive": t.keepalive}
        if t.v5:
            kwargs["clean_start"] = self.clean
            kwargs["properties"] = self.props
        try:
            self.client.connect(t.host, t.port, **kwargs)
        except ssl.SSLCertVerificationError as exc:
            raise TLSVerificationError(
                f"{t.url.redacted}: TLS certificate verification failed ({exc.verify_message}); set tls_ca_file "
                "to the CA that signed the broker's certificate (tls_verify=false turns checking off: unsafe)"
            ) from None
        except ssl.SSLError as exc:
            raise TLSVerificationError(f"{t.url.redacted}: TLS handshake failed ({exc.reason})") from None
        except OSError as exc:
            raise ConnectionLostError(f"{t.url.redacted}: cannot connect ({exc.strerror or exc})") from None
        self.client.loop_start()
        if not self.connected.wait(t.connect_timeout) or self.connect_error:
            reason = self.connect_error or f"no CONNACK within {t.connect_timeout} s"
            self.stop(graceful=False)
            if self.connect_error:
                raise BrokerError(f"{t.url.redacted}: broker refused the connection: {reason}")
            raise ConnectionLostError(f"{t.url.redacted}: {reason}")
        if self.topics:
            self.wait_subscribed()

    def wait_subscribed(self) -> None:
        t = self.transport
        if not self.subscribed.wait(t.connect_timeout):
            self.stop(graceful=False)
            raise ConnectionLostError(f"{t.url.redacted}: no SUBACK within {t.connect_timeout} s")
        if self.subscribe_error:
            error = self.subscribe_error
            self.stop(graceful=False)
            raise BrokerError(f"{t.url.redacted}: subscription refused: {error}")

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
        self.client.disconnect()
        self.disconnected.wait(5.0)
        self.client.loop_stop()
        self._end("closed")

    def subscribe_topic(self, topic: str) -> None:
        with self.lock:
            self.topics.append(topic)
            self.subscribed.clear()
            self._send_subscribe([topic])
        self.wait_subscribed()

    def _send_subscribe(self, topics: Sequence[str]) -> None:
        qos = self.transport.qos
        if self.transport.v5:
            _rc, mid = self.client.subscribe([(t, SubscribeOptions(qos=qos)) for t in topics])
        else:
            _rc, mid = self.client.subscribe([(t, qos) for t in topics])
        self._suback_mid = mid

    # ---- paho callbacks (paho's thread) ---------------------------------------------
    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode,
                    properties: Properties | None) -> None:
        if reason.is_failure:
            self.connect_error = f"{reason.getName()} ({reason.value:#04x})"
            self.connected.set()
            # A refused CONNECT (bad credentials, banned id) will not heal by retrying.
            client.disconnect()
            return
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

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode,
                       properties: Properties | None) -> None:
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
        events = self.transport.events
        for seq in lost:
            events.confirm(seq, unknown(f"connection lost before the broker answered ({why})"))
        if self.role == "consumer":
            self.transport.consumer_generation_ended(self, old, why)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: ReasonCode,
                    properties: Properties | None) -> None:
        # paho holds self.lock (its _out_message_mutex) while calling this.
        ok = not (self.transport.v5 and reason.is_failure)
        seq = self.pending.pop(mid, None)
        if seq is not None:
            outcome: ConfirmOutcome = CONFIRMED if ok else refused(
                f"broker answered PUBACK {reason.getName()} ({reason.value:#04x})")
            self.transport.events.confirm(seq, outcome)
            return
        op = self.copies.pop(mid, None)
        if op is None or self.blocked_on != mid:
            return  # a resend from an earlier generation: already reported unknown
        self.blocked_on = None
        if self.queue and self.queue[0] is op:
            self.queue.popleft()
        if ok:
            self._ack(op)
        else:
            # Without the copy the original must stay on the broker: no PUBACK, so
            # the session redelivers it after the next reconnect.
            log.warning("%s: %s copy refused by the broker (%s); message left unacked for redelivery",
                        self.transport.url.redacted, op.verb.value, reason.getName())
        self.drain()

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        t = self.transport
        decoded = codec.decode_properties(msg.properties) if t.v5 else codec.Decoded()
        dup = bool(msg.dup)
        topic = msg.topic  # a property that decodes the topic bytes on every read
        body = msg.payload if type(msg.payload) is bytes else bytes(msg.payload)
        count: int | None = None
        if t.v5:
            count = decoded.attempt + 1 + (1 if dup else 0)
        requeued = not t.v5 and t.take_requeued(topic, body)
        inbound = InboundMessage(
            wire_tag=msg.mid, generation=self.generation, body=body,
            source=self.source or topic, headers=decoded.headers, routing_key=topic,
            message_id=decoded.message_id, correlation_id=decoded.correlation_id, reply_to=decoded.reply_to,
            content_type=decoded.content_type, timestamp=decoded.timestamp,
            redelivered=dup or decoded.attempt > 0 or requeued, delivery_count=count,
        )
        if self.role == "consumer":
            if msg.qos > 0:
                # No lock: a dict store is atomic, and taking self.lock here would make
                # paho's thread wait while an application thread writes a PUBACK.
                self.qos_of[msg.mid] = msg.qos
            t.events.deliver(self.subscription, inbound)
        else:
            # Reply inbox: replies are fire-and-forget, acknowledge on receipt.
            t.events.reply(inbound)
            if msg.qos > 0:
                client.ack(msg.mid, msg.qos)

    # ---- settlement (lock held) ---------------------------------------------------------
    def drain(self) -> None:
        while self.queue and self.blocked_on is None:
            op = self.queue[0]
            if op.verb is WireVerb.ACK:
                self.queue.popleft()
                self._ack(op)
                continue
            mid = self._publish_copy(op)
            if mid is None:
                return  # not connected: on_disconnect has cleared the queue
            self.copies[mid] = op
            self.blocked_on = mid

    def _ack(self, op: WireSettle) -> None:
        mid = int(op.wire_tag)  # type: ignore[call-overload]
        qos = self.qos_of.pop(mid, 0)
        if qos:
            self.client.ack(mid, qos)

    def _publish_copy(self, op: WireSettle) -> int | None:
        t = self.transport
        message = op.message
        assert message is not None, "requeue/reject ops carry the original message"
        topic = message.routing_key or message.source
        if op.verb is WireVerb.REJECT:
            target = dead_letter_topic(t.dead_letter_template, topic)
        else:
            target = t.retry_target(topic)
        props = None
        if t.v5:
            extra = {codec.ATTEMPT_KEY: str(message.delivery_count or 1)}
            if op.verb is WireVerb.REJECT:
                extra[codec.DEAD_LETTERED_FROM_KEY] = topic
            props = codec.publish_properties(
                headers=message.headers, message_id=message.message_id, correlation_id=message.correlation_id,
                reply_to=message.reply_to, content_type=message.content_type, timestamp=message.timestamp,
                extra=extra,
            )
        if not t.v5 and op.verb is WireVerb.REQUEUE:
            t.remember_requeued(target, message.body)
        # Always QoS 1: the original is PUBACKed only once the broker has the copy.
        info = self.client.publish(target, message.body, qos=1, properties=props)
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return None
        return info.mid


class MqttTransport(ThreadedAsyncSide):
    option_specs = OPTIONS
    supports_sync = True
    supports_async = True

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.protocol = _PROTOCOLS[str(options.get("protocol", "5"))]
        self.v5 = self.protocol == MQTTProtocolVersion.MQTTv5
        self.capabilities: Capabilities = CAPABILITIES_V5 if self.v5 else CAPABILITIES_V311
        self.tls = url.scheme == "mqtts"
        self.host = url.host or "localhost"
        self.port = url.port or (8883 if self.tls else 1883)
        if url.path not in ("", "/"):
            raise InvalidURLError(f"{url.redacted!r}: an MQTT URL has no path (topics are given to consume/publish)")
        self.client_id: str | None = options.get("client_id")
        self.session_expiry = int(options.get("session_expiry", 3600))
        self.qos = int(options.get("qos", 1))
        self.dead_letter_template = str(options.get("dead_letter_topic") or DEFAULT_DEAD_LETTER_TOPIC)
        self.retry_template: str | None = options.get("retry_topic")
        self.tls_ca_file: str | None = options.get("tls_ca_file")
        self.tls_verify = bool(options.get("tls_verify", True))
        self.keepalive = int(options.get("keepalive", 30))
        self.connect_timeout = float(options.get("connect_timeout", 10.0))
        self.publish_inflight = int(options.get("publish_inflight", 100))
        self._lock = threading.Lock()
        self._pub: _Link | None = None
        self._subs: dict[str, _Link] = {}
        self._inbox: str | None = None
        self._check_topic = CheckedOnce(check_topic_name)
        self._opened_subs = 0
        # MQTT 3.1.1 copies cannot carry a marker: remember what this process requeued
        # so the copy still comes back flagged redelivered (bounded, in-process only).
        self._requeued: collections.OrderedDict[tuple[str, bytes], int] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"<MqttTransport {self.url.redacted} protocol={'5' if self.v5 else '3.1.1'}>"

    @property
    def generation(self) -> int:
        with self._lock:
            links = [*self._subs.values(), *([self._pub] if self._pub else [])]
        return max((link.generation for link in links), default=0)

    # ---- helpers used by links -------------------------------------------------------
    def configure_tls(self, client: paho.Client) -> None:
        if not self.tls_verify:
            log.warning("%s: tls_verify=false: the broker certificate is NOT checked", self.url.redacted)
        try:
            client.tls_set(ca_certs=self.tls_ca_file,
                           cert_reqs=ssl.CERT_REQUIRED if self.tls_verify else ssl.CERT_NONE)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidOptionError(f"tls_ca_file could not be loaded: {exc}") from None
        if not self.tls_verify:
            client.tls_insecure_set(True)

    def retry_target(self, topic: str) -> str:
        return self.retry_template.replace("{topic}", topic) if self.retry_template else topic

    def remember_requeued(self, topic: str, body: bytes) -> None:
        key = (topic, hashlib.sha1(body).digest())
        with self._lock:
            self._requeued[key] = self._requeued.get(key, 0) + 1
            while len(self._requeued) > 10_000:
                self._requeued.popitem(last=False)

    def take_requeued(self, topic: str, body: bytes) -> bool:
        key = (topic, hashlib.sha1(body).digest())
        with self._lock:
            left = self._requeued.get(key, 0)
            if not left:
                return False
            if left == 1:
                del self._requeued[key]
            else:
                self._requeued[key] = left - 1
            return True

    def consumer_generation_ended(self, link: _Link, generation: int, reason: str) -> None:
        # The core ends every ledger whose generation is <= the one reported, so only
        # report when no other live subscription is older; otherwise the ledger learns
        # it from the next delivery and settle() refuses the stale ops.
        with self._lock:
            others = [s.generation for s in self._subs.values() if s is not link and s.live]
        if all(g > generation for g in others):
            self.events.generation_ended(generation, reason)

    def links(self) -> list[_Link]:
        """Every live paho client of this transport (tests cut or inspect them)."""
        with self._lock:
            return [*([self._pub] if self._pub else []), *self._subs.values()]

    def _new_link(self, role: str, client_id: str, *, clean: bool, receive_maximum: int | None = None,
                  topics: Sequence[str] = (), subscription: str = "", source: str = "") -> _Link:
        expiry = 0 if clean else self.session_expiry
        return _Link(self, role, client_id, clean=clean, session_expiry=expiry, receive_maximum=receive_maximum,
                     topics=topics, subscription=subscription, source=source)

    def _publisher(self) -> _Link:
        if self._pub is None:
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        return self._pub

    # ---- sync side ---------------------------------------------------------------------
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
        self._ensure_session(consumer_session_id(name, self.client_id), name)
        if dead_letter:
            dlq = dead_letter_topic(self.dead_letter_template, name)
            self._ensure_session(derived_session_id(dlq), dlq)

    def _ensure_session(self, session: str, topic: str) -> None:
        link = self._new_link("declare", session, clean=False, topics=[topic])
        link.start()
        link.stop(graceful=False)

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        with self._lock:
            index = self._opened_subs
            self._opened_subs += 1
        topics = [source]
        retry = self.retry_target(source)
        if retry != source:
            topics.append(retry)
        link = self._new_link("consumer", consumer_session_id(source, self.client_id, index), clean=False,
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
            link._ack(op)
        return True

    def _settle_on(self, subscription: str, group: Sequence[WireSettle]) -> None:
        # dict.get is atomic under the GIL; the link's own lock guards its state.
        link = self._subs.get(subscription)
        if link is None:
            raise StaleDeliveryError(
                f"subscription {subscription} is closed; nothing was sent and the broker will redeliver")
        with link.lock:
            if not link.live or any(op.generation != link.generation for op in group):
                raise StaleDeliveryError(
                    f"{len(group)} settlement(s) from connection generation {group[0].generation}, which "
                    f"has ended (or the link is down); nothing was sent and the broker will redeliver them")
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
        props = None
        # A bare body needs no properties: skipping them keeps the hot path as cheap as raw paho.
        if self.v5 and (message.headers or message.message_id or message.correlation_id or message.reply_to
                        or message.content_type or message.timestamp is not None):
            props = codec.publish_properties(
                headers=message.headers, message_id=message.message_id, correlation_id=message.correlation_id,
                reply_to=message.reply_to, content_type=message.content_type, timestamp=message.timestamp)
        qos = self.qos
        with link.lock:
            if not link.live:
                outcome = unknown("not connected to the broker (reconnecting); the message was not sent")
            else:
                try:
                    info = link.client.publish(destination, message.body, qos=qos, properties=props)
                except ValueError as exc:  # invalid topic or payload: nothing went out
                    outcome = refused(f"paho refused the publish: {exc}")
                else:
                    if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
                        outcome = unknown("connection lost while publishing")
                    elif info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                        outcome = unknown(f"paho could not queue the publish: {paho.error_string(info.rc)}")
                    elif qos == 0:
                        outcome = unknown("QoS 0 publishes are never acknowledged")
                    else:
                        link.pending[info.mid] = seq
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
