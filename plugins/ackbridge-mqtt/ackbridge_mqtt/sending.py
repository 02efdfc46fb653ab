"""The send side: publishes, their confirms, and the reply inbox's topic.

Publishing and the reply inbox use one clean client (the publisher link).
:class:`Sending` is the transport's part (checks, encodes and hands a publish
to paho); :class:`Confirms` is a link's part (which publish a PUBACK answers).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

from ackbridge.capabilities import Capabilities, Verb
from ackbridge.errors import InvalidOptionError
from ackbridge.messages import CONFIRMED, ConfirmOutcome, OutboundMessage, refused, unknown, unsent
from ackbridge.transport import TransportEvents
from ackbridge.transport.text import CheckedOnce
from ackbridge_mqtt import codec
from ackbridge_mqtt.options import MqttSettings
from ackbridge_mqtt.sessions import check_topic_name

if TYPE_CHECKING:
    from ackbridge_mqtt.link import Link

#: MQTT 5 PUBACK reason code: accepted, but no subscription matched (nothing holds the message).
NO_MATCHING_SUBSCRIBERS = 0x10


def publish_accepted(reason: ReasonCode, v5: bool) -> bool:
    """Whether a PUBACK means the broker holds the message. 0x10 "No matching
    subscribers" is a success code in MQTT 5, but no subscription and no persistent
    session holds the message: it went nowhere, as an unroutable publish does on
    RabbitMQ. Mosquitto answers so for the sessions it restored after a restart until
    their clients subscribe again (the scoreboard's broker-restart row lost such
    messages while they were counted confirmed)."""
    return not (v5 and (reason.is_failure or reason.value == NO_MATCHING_SUBSCRIBERS))


class Confirms:
    """A link's publishes awaiting their PUBACK (guarded by the link's lock).

    With *hold* (the link's client reports its reads: read_bursts.py) an answer is
    held until :meth:`take_held` + :meth:`report` hand the read's answers over together."""

    def __init__(self, events: TransportEvents, *, hold: bool = False) -> None:
        self._events = events
        self._hold = hold
        self.pending: dict[int, int] = {}  # publish mid -> seq
        self.held: list[tuple[int, ConfirmOutcome]] = []

    def answered(self, mid: int, reason: ReasonCode, v5: bool) -> bool:
        """Report (or hold) the confirm of *mid*; False when *mid* is no publish of ours."""
        seq = self.pending.pop(mid, None)
        if seq is None:
            return False
        outcome: ConfirmOutcome = CONFIRMED if publish_accepted(reason, v5) else refused(
            f"broker answered PUBACK {reason.getName()} ({reason.value:#04x})")
        if self._hold:
            self.held.append((seq, outcome))
        else:
            self._events.confirm(seq, outcome)
        return True

    def take_held(self) -> list[tuple[int, ConfirmOutcome]]:
        held, self.held = self.held, []
        return held

    def report(self, held: list[tuple[int, ConfirmOutcome]]) -> None:
        """Hand over answers taken with :meth:`take_held` (call without the link's lock)."""
        if len(held) == 1:
            self._events.confirm(*held[0])
        elif held:
            self._events.confirm_batch(held)

    def take_all(self) -> list[int]:
        lost = list(self.pending.values())
        self.pending.clear()
        return lost

    def report_lost(self, lost: list[int], why: str) -> None:
        if lost:
            outcome = unknown(f"connection lost before the broker answered ({why})")
            self._events.confirm_batch([(seq, outcome) for seq in lost])


class Sending:
    """The transport's publishes and reply inbox, on the publisher link."""

    def __init__(self, settings: MqttSettings, events: TransportEvents, capabilities: Capabilities,
                 publisher: Callable[[], Link]) -> None:
        self._settings = settings
        self._events = events
        self._capabilities = capabilities
        self._publisher = publisher
        self._check_topic = CheckedOnce(check_topic_name)
        self._lock = threading.Lock()
        self.inbox: str | None = None

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        link = self._publisher()
        events = self._events
        try:
            self._check_topic(destination)
        except InvalidOptionError as exc:
            # Mosquitto drops the connection on such a topic and paho resends the
            # PUBLISH on every reconnect: it must never reach paho.
            events.confirm(seq, refused(f"not sent: {exc}"))
            return
        v5 = self._settings.v5
        if not v5 and message.headers:
            raise InvalidOptionError("MQTT 3.1.1 cannot carry headers (no user properties); use protocol=5")
        outcome: ConfirmOutcome | None = None
        gone = False
        props = None
        # A bare body needs no properties: skipping them keeps the hot path as cheap as raw paho.
        if v5 and (message.headers or message.message_id or message.correlation_id or message.reply_to
                   or message.content_type or message.timestamp is not None):
            props = codec.publish_properties(
                headers=message.headers, message_id=message.message_id, correlation_id=message.correlation_id,
                reply_to=message.reply_to, content_type=message.content_type, timestamp=message.timestamp)
        qos = self._settings.qos
        too_big = codec.over_packet_limit(link.max_packet, destination, message.body, props)
        if too_big is not None:
            events.confirm(seq, refused(too_big))
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
                        link.confirms.pending[info.mid] = seq
        if gone:
            link.lost("connection lost while publishing")
        if outcome is not None:
            events.confirm(seq, outcome)

    def open_reply_inbox(self) -> str:
        if not self._capabilities.support(Verb.LABELLED_ACKS).available:
            # The core opens the inbox before it validates labels and checks the capability;
            # raising here would hide InvalidLabelError. The core's own require() raises the
            # UnsupportedVerbError right after, before anything is published.
            return "ackbridge/reply/unsupported"
        with self._lock:
            if self.inbox is not None:
                return self.inbox
        inbox = f"ackbridge/reply/{uuid.uuid4().hex}"
        self._publisher().subscribe_topic(inbox)
        with self._lock:
            self.inbox = inbox
        return inbox
