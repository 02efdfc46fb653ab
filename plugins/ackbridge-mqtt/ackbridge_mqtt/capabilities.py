"""What MQTT can do, per protocol version, as data.

MQTT has one settlement packet (PUBACK at QoS 1) and it must be sent in
receive order; everything else is emulated by republishing, and the tables
say so. ``ordered_acks`` makes the core ledger release PUBACKs in receive
order even when the application settles out of order.
"""

from __future__ import annotations

from ackbridge.capabilities import Capabilities, Verb, emulated, native, unsupported

_COMMON_NOTES = (
    "a queue is a topic plus a persistent session (fixed client id, clean start off, session expiry > 0)",
    "inbound QoS 2 cannot be redelivered once paho has sent PUBREC: use qos=1 for at-least-once",
    "Mosquitto keeps 20 in flight and 1000 queued per session by default and silently drops beyond "
    "that: see ackbridge_mqtt.limits.check_settings",
    "requeued copies are new messages at the tail of the topic; every subscriber of the topic sees them "
    "unless retry_topic is set",
)

CAPABILITIES_V5 = Capabilities(
    broker="mqtt5",
    verbs={
        Verb.ACK: native("PUBACK (QoS 1) sent when the delivery is settled (manual_ack)"),
        Verb.REQUEUE: emulated(
            "republished (QoS 1, confirmed) to the same topic or retry_topic with an attempt-count user "
            "property, then the original is PUBACKed; the copy goes to the tail"),
        Verb.REJECT: emulated(
            "published (QoS 1, confirmed) to dead_letter_topic with the attempt count, then PUBACKed"),
        Verb.CUMULATIVE_ACK: emulated("individual PUBACKs in receive order (MQTT has no cumulative ack)"),
        Verb.CONFIRM: native("PUBACK (QoS 1) / PUBCOMP (QoS 2) with a reason code"),
        Verb.CONFIRM_REFUSED: native("QoS 1 PUBACK reason code >= 0x80 (e.g. 0x87 not authorized, "
                                     "0x97 quota exceeded)"),
        Verb.DELIVERY_COUNT: emulated(
            "lower bound: ackbridge-attempt user property carried by requeued copies, +1 if the dup flag "
            "is set (the broker does not count)"),
        Verb.LABELLED_ACKS: native("replies to a per-connection response topic with correlation data"),
    },
    ordered_acks=True,
    notes=_COMMON_NOTES,
)

CAPABILITIES_V311 = Capabilities(
    broker="mqtt3.1.1",
    verbs={
        Verb.ACK: native("PUBACK (QoS 1) sent when the delivery is settled (manual_ack)"),
        Verb.REQUEUE: emulated(
            "body republished (QoS 1) to the same topic or retry_topic, then PUBACKed; 3.1.1 has no "
            "properties, so headers, ids and the attempt count are lost"),
        Verb.REJECT: emulated(
            "body published (QoS 1) to dead_letter_topic, then PUBACKed; no headers and no attempt count"),
        Verb.CUMULATIVE_ACK: emulated("individual PUBACKs in receive order (MQTT has no cumulative ack)"),
        Verb.CONFIRM: native(
            "PUBACK received: the handshake completed, nothing more (3.1.1 PUBACK has no reason code, "
            "and Mosquitto PUBACKs messages it then drops, e.g. oversized or unauthorized)"),
        Verb.CONFIRM_REFUSED: unsupported("MQTT 3.1.1 PUBACK carries no reason code: refusals are invisible"),
        Verb.DELIVERY_COUNT: unsupported(
            "MQTT 3.1.1 has only the dup flag and no user properties to carry a count"),
        Verb.LABELLED_ACKS: unsupported(
            "MQTT 3.1.1 has no response topic, correlation data or user properties (use protocol=5)"),
    },
    ordered_acks=True,
    notes=(*_COMMON_NOTES, "MQTT 3.1.1 messages carry the body only: headers and message ids are dropped"),
)
