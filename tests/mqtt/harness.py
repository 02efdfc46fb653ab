"""BrokerHarness for Mosquitto, answering from the broker's side of the wire.

MQTT has no queue-depth API. The harness therefore:

* counts what entered a queue with an independent raw paho subscriber (the
  "observer") subscribed when the queue is created, at the same time as the
  queue's persistent session;
* routes the clients under test through :class:`~tests.mqtt.tap.Tap`, which
  reads the PUBLISH packets Mosquitto sends and the PUBACKs that come back:
  ``unacked`` = in flight on live connections, ``ready`` = entered - PUBACKed
  - in flight;
* reads dead-letter topics by connecting a raw client to the dead-letter
  session and collecting what the broker (re)delivers, without acknowledging.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from ackbridge.testing.faults import transport_of
from ackbridge.testing.harness import BrokerHarness, eventually, until_quiet
from ackbridge_mqtt.sessions import DEFAULT_DEAD_LETTER_TOPIC, dead_letter_topic, derived_session_id
from ackbridge_mqtt.wakeup_pair import close_wakeup_pair
from tests.mqtt.tap import Tap

HOST, PORT = "127.0.0.1", 1883
SESSION_EXPIRY = 600


class RawClient:
    """A plain paho v5 client on the real broker port (not through the tap)."""

    def __init__(self, client_id: str, *, clean: bool, manual_ack: bool = True, expiry: int = SESSION_EXPIRY,
                 receive_maximum: int = 65535, port: int = PORT) -> None:
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=MQTTProtocolVersion.MQTTv5, manual_ack=manual_ack)
        self.messages: list[paho.MQTTMessage] = []
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.session_present: bool | None = None
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = expiry
        props.ReceiveMaximum = receive_maximum
        self.client.connect(HOST, port, clean_start=clean, properties=props)
        self.client.loop_start()
        if not self.connected.wait(10):
            self.close()
            raise AssertionError(f"raw client {client_id} could not connect to Mosquitto")

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.session_present = bool(flags.session_present)
        self.connected.set()

    def _on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self.lock:
            self.messages.append(msg)

    def subscribe(self, *topics: str, qos: int = 1) -> None:
        self.subscribed.clear()
        self.client.subscribe([(t, SubscribeOptions(qos=qos)) for t in topics])
        if not self.subscribed.wait(10):
            raise AssertionError(f"no SUBACK for {topics}")

    def collect(self, quiet: float = 0.4, limit: float = 5.0) -> list[paho.MQTTMessage]:
        """Wait until nothing new arrived for *quiet* seconds (at most *limit*)."""
        end = time.monotonic() + limit
        last_count, last_change = -1, time.monotonic()
        while time.monotonic() < end:
            with self.lock:
                count = len(self.messages)
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change >= quiet:
                break
            time.sleep(0.02)
        with self.lock:
            return list(self.messages)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        close_wakeup_pair(self.client)


def peek_session(session_id: str, *, quiet: float = 0.4) -> list[paho.MQTTMessage]:
    """What the broker holds for *session_id*: connect as it, collect, never PUBACK."""
    raw = RawClient(session_id, clean=False)
    try:
        return raw.collect(quiet=quiet)
    finally:
        raw.close()


def ensure_session(session_id: str, *topics: str) -> None:
    raw = RawClient(session_id, clean=False)
    try:
        raw.subscribe(*topics)
    finally:
        raw.close()


def delete_session(session_id: str) -> None:
    with contextlib.suppress(Exception):
        RawClient(session_id, clean=True, expiry=0).close()


class MqttHarness(BrokerHarness):
    can_count_unacked = True
    can_hold_confirms = True

    def __init__(self, protocol: str = "5") -> None:
        self.protocol = protocol
        self.name = f"mosquitto-{protocol}"
        self.run = uuid.uuid4().hex[:10]
        self.tap = Tap(PORT)
        self.entered: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.observer = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"ab-observer-{self.run}",
                                    protocol=MQTTProtocolVersion.MQTTv5)
        self.observer.on_message = self._observed
        subscribed = threading.Event()
        self.observer.on_subscribe = lambda *a: subscribed.set()
        self._observer_subscribed = subscribed
        connected = threading.Event()
        self.observer.on_connect = lambda *a: connected.set()
        self.observer.connect(HOST, PORT, clean_start=True)
        self.observer.loop_start()
        assert connected.wait(10), "observer could not connect"
        self.sessions: list[str] = []

    def _observed(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self._lock:
            self.entered[msg.topic] += 1

    # ---- BrokerHarness --------------------------------------------------------------
    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"mqtt://127.0.0.1:{self.tap.port}" + (f"?{query}" if query else "")

    def connect_options(self) -> dict[str, Any]:
        return {"protocol": self.protocol}

    def unroutable_target(self) -> str | None:
        """MQTT 5: a topic no subscription or session holds (PUBACK 0x10, refused). 3.1.1's
        PUBACK has no reason code, so nothing can be refused there."""
        return f"abtest-unroutable/{uuid.uuid4().hex}" if self.protocol == "5" else None

    def new_queue(self, *, dead_letter: bool = True) -> str:
        topic = f"abtest/{self.run}/{uuid.uuid4().hex[:10]}"
        self._observer_subscribed.clear()
        self.observer.subscribe([(topic, SubscribeOptions(qos=1))])
        assert self._observer_subscribed.wait(10), "observer SUBACK"
        session = derived_session_id(topic)
        ensure_session(session, topic)
        self.sessions.append(session)
        if dead_letter:
            dlq = dead_letter_topic(DEFAULT_DEAD_LETTER_TOPIC, topic)
            ensure_session(derived_session_id(dlq), dlq)
            self.sessions.append(derived_session_id(dlq))
        return topic

    def ready(self, queue: str) -> int:
        with self._lock:
            entered = self.entered[queue]
        with self.tap.lock:
            acked = self.tap.acked[queue]
        return entered - acked - self.tap.unacked(queue)

    def unacked(self, queue: str) -> int:
        return self.tap.unacked(queue)

    def dead_lettered(self, queue: str) -> list[bytes]:
        dlq = dead_letter_topic(DEFAULT_DEAD_LETTER_TOPIC, queue)
        return [bytes(m.payload) for m in peek_session(derived_session_id(dlq), quiet=0.3)]

    def dead_letter_messages(self, queue: str) -> list[paho.MQTTMessage]:
        dlq = dead_letter_topic(DEFAULT_DEAD_LETTER_TOPIC, queue)
        return peek_session(derived_session_id(dlq), quiet=0.3)

    @staticmethod
    def transport(connection: Any) -> Any:
        return transport_of(connection)

    def break_connection(self, connection: Any) -> None:
        transport = self.transport(connection)
        links = transport.links()
        before = {id(link): link.generation for link in links}
        if self.tap.holding():
            # paho writes on its own loop thread: cut once the client's bytes stop
            # arriving, so the cut meets what was just published on the wire.
            until_quiet(lambda: self.tap.upstream_bytes, quiet_s=0.3, limit_s=5.0)
        self.tap.cut({link.client_id for link in links})
        eventually(lambda: all(not link.live or link.generation != before[id(link)] for link in links),
                   timeout=10, message="client noticed the cut")

    @contextlib.contextmanager
    def hold_confirms(self, connection: Any) -> Iterator[None]:
        transport = self.transport(connection)
        with self.tap.hold({link.client_id for link in transport.links() if link.role == "publisher"}):
            yield

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.observer.disconnect()
            self.observer.loop_stop()
            close_wakeup_pair(self.observer)
        self.tap.close()
        for session in self.sessions:
            delete_session(session)
