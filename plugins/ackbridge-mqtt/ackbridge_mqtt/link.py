"""One paho client: one MQTT session, its network thread and its generations.

A link runs paho's network loop on its own thread (``loop_start``) and lets
paho reconnect; each CONNACK starts a new generation (numbered across all
links, so a delivery's generation names exactly one connection). What comes
in is handed to the link's :class:`~ackbridge_mqtt.receiving.Receiver`
(deliveries, settlement) and :class:`~ackbridge_mqtt.sending.Confirms`
(publish answers).

Locking: every piece of a link's state is guarded by paho's own
``_out_message_mutex`` (an RLock). paho holds that lock while it calls
``on_publish``, so taking it around ``client.publish`` + recording the mid
closes the race where the PUBACK arrives before we know which publish it
answers, and taking it in ``settle`` keeps a PUBACK from crossing a reconnect
(the generation check and the write happen under the same lock that
``on_connect`` / ``on_disconnect`` take to change the generation).
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from ackbridge.errors import ConnectionLostError
from ackbridge.kernel import backoff
from ackbridge.transport import TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_mqtt import read_bursts
from ackbridge_mqtt.capabilities import MAX_RECEIVE_MAXIMUM
from ackbridge_mqtt.errors import connect_error, lost_before_connack, refused_connect, subscription_refused
from ackbridge_mqtt.options import MqttSettings
from ackbridge_mqtt.receiving import Receiver
from ackbridge_mqtt.requeued import RequeuedMemory
from ackbridge_mqtt.sending import Confirms
from ackbridge_mqtt.tls import configure_tls
from ackbridge_mqtt.wakeup_pair import close_wakeup_pair

log = logging.getLogger("ackbridge.mqtt")

_generations = itertools.count(1)
_generation_lock = threading.Lock()

#: Called (outside the lock) when a consumer link's generation ends: (link, generation, reason).
GenerationEnded = Callable[["Link", int, str], None]


def _next_generation() -> int:
    with _generation_lock:
        return next(_generations)


class Link:
    """One paho client (one MQTT session), its generation and its parts."""

    def __init__(self, url: BrokerURL, settings: MqttSettings, events: TransportEvents, requeued: RequeuedMemory,
                 role: str, client_id: str, *, clean: bool, session_expiry: int, receive_maximum: int | None,
                 topics: Sequence[str] = (), subscription: str = "", source: str = "",
                 generation_ended: GenerationEnded | None = None) -> None:
        self.url = url
        self.settings = settings
        self.role = role
        self.client_id = client_id
        self.subscription = subscription
        self.source = source
        self.topics = list(topics)
        self.v5 = settings.v5
        self._generation_ended = generation_ended
        connection = settings.connection
        # With the fast path, confirms go to the core once per socket read (read_bursts.py).
        self.read_bursts = read_bursts.enabled()
        client_type = read_bursts.ReadBurstClient if self.read_bursts else paho.Client
        self.client = client_type(
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
        self._suback_mid: int | None = None
        #: Set by the UNSUBACK of close()'s barrier (see ``stop``).
        self.barrier_passed = threading.Event()
        self.events = events
        self.confirms = Confirms(events, hold=self.read_bursts)
        if isinstance(self.client, read_bursts.ReadBurstClient):
            self.client.after_read = self._hand_over
        self.receiver = Receiver(self.client, settings, events, requeued, url, role=role,
                                 subscription=subscription, source=source)
        c = self.client
        c.max_inflight_messages_set(settings.publish_inflight)
        # paho's own loop reconnects (reconnect_on_failure above = the `reconnect` option):
        # it doubles the wait from min_delay to max_delay and resets it after a CONNACK,
        # the schedule of ackbridge.kernel.backoff, so it gets the core's first delay and the
        # `reconnect_max_delay` option (paho adds no jitter).
        c.reconnect_delay_set(backoff.INITIAL_DELAY, connection.reconnect_max_delay)  # type: ignore[arg-type]
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
        url = self.url
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
        timeout = self.settings.connection.connect_timeout
        if not self.subscribed.wait(timeout):
            self.stop(graceful=False)
            raise ConnectionLostError(f"{self.url.redacted}: no SUBACK within {timeout} s")
        if self.subscribe_error:
            error = self.subscribe_error
            self.stop(graceful=False)
            raise subscription_refused(self.url, error)

    def drained(self, quiet_limit: float) -> bool:
        """Wait until every settlement decided on this link is on the wire. Each
        requeue/reject waits for its copy's answer before the next goes out, so a
        long run of them takes a round trip each: the wait ends when nothing is left,
        or when nothing moved for *quiet_limit* seconds (a broker that stopped
        answering), never after a fixed total that a busy broker would overrun."""
        last_seen, moved_at = -1, time.monotonic()
        while True:
            with self.lock:
                receiver = self.receiver
                if not self.live or receiver.idle:
                    return True
                left = len(receiver.queue)
            now = time.monotonic()
            if left != last_seen:
                last_seen, moved_at = left, now
            elif now - moved_at > quiet_limit:
                log.warning("ackbridge-mqtt: closing %s: %d settlement(s) not sent, the broker answered nothing "
                            "for %.0f s; those messages will be delivered again", self.client_id, left, quiet_limit)
                return False
            time.sleep(0.01)

    def stop(self, *, graceful: bool = True) -> None:
        self.closing = True
        if graceful:
            self.drained(5.0)
            if self.role == "consumer":
                self._barrier(5.0)
        self.client.disconnect()
        self.disconnected.wait(5.0)
        self.client.loop_stop()
        close_wakeup_pair(self.client)
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
            self.lost_before_connack = lost_before_connack(self.settings.tls)
            self.connected.set()
        self._end(f"disconnected: {reason.getName()}")
        self.disconnected.set()

    def _hand_over(self) -> None:
        """paho's thread, after each read: the confirms held during it, as one burst."""
        if not self.confirms.held:  # only this thread adds to it (on_publish)
            return
        with self.lock:
            held = self.confirms.take_held()
        self.confirms.report(held)

    def _end(self, why: str) -> None:
        with self.lock:
            # Answered before the end: reported as such, ahead of what the end lost.
            held = self.confirms.take_held()
            live, self.live = self.live, False
            if live:
                old = self.generation
                lost = self.confirms.take_all()
                self.receiver.clear()
        self.confirms.report(held)
        if not live:
            return
        self.confirms.report_lost(lost, why)
        # stop() (the consumer or the connection closed) ends the link for good: no
        # reconnect follows, so the core is not told of a generation ended (it would
        # count one in ackbridge.reconnects; the consumer's ledger is closed already).
        if self.role == "consumer" and self._generation_ended is not None and not self.closing:
            self._generation_ended(self, old, why)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: ReasonCode,
                    properties: Properties | None) -> None:
        # paho holds self.lock (its _out_message_mutex) while calling this.
        if not self.confirms.answered(mid, reason, self.v5):
            self.receiver.copy_answered(mid, reason)

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        if not self.live:
            # Read after sever() ended the generation: never PUBACKed, so the broker redelivers it.
            return
        self.receiver.message(msg, self.generation)
