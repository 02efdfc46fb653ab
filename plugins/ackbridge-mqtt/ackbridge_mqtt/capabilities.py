"""What MQTT can do, per protocol version, as data.

MQTT has one settlement packet (PUBACK at QoS 1) and it must be sent in
receive order; everything else is emulated by republishing, and the tables
say so. ``ordered_acks`` makes the core ledger release PUBACKs in receive
order even when the application settles out of order.
"""

from __future__ import annotations

from ackbridge.capabilities import (
    Capabilities,
    ConfirmDurability,
    Durability,
    RejectFate,
    RejectOutcome,
    RetryMethod,
    Topology,
    Verb,
    emulated,
    native,
    unsupported,
)

#: The largest Receive Maximum an MQTT 5 CONNECT carries (a 16-bit property): the
#: most unacked messages a v5 consumer can ask for, so the largest prefetch.
MAX_RECEIVE_MAXIMUM = 65535

_COMMON_NOTES = (
    "a queue is a topic plus a persistent session (fixed client id, clean start off, session expiry > 0)",
    "inbound QoS 2 cannot be redelivered once paho has sent PUBREC: use qos=1 for at-least-once",
    "Mosquitto keeps 20 in flight and 1000 queued per session by default and silently drops beyond "
    "that: see ackbridge_mqtt.limits.check_settings",
    "requeued copies are new messages at the tail of the topic; every subscriber of the topic sees them "
    "unless retry_topic is set",
)

#: Mosquitto 2.0 answers PUBACK once the message is in its memory and saves its store later.
DURABILITY = ConfirmDurability(
    Durability.UNTIL_NEXT_SAVE,
    "Mosquitto PUBACKs a message held in memory; it survives a broker kill or restart only once saved "
    "(`persistence true` + `persistence_location`), and a kill loses what the broker confirmed after its last "
    "save and had not yet delivered. Saves: every `autosave_interval` seconds, counted in whole seconds with "
    "Mosquitto 2.0 saving once *more* than the interval has passed (default 1800; `1` saves every 2 s: the "
    "scoreboard's publisher rows lost 213 of 249 and 267 of 307 ids confirmed in the 0.03-0.05 s after a save, "
    "and nothing confirmed before it) or, with `autosave_on_changes true`, after every `autosave_interval` "
    "changes (1: after each, still after the PUBACK, and the whole store is rewritten each time: 15 msgs/s "
    "measured with 900 queued); `persistence false` (Mosquitto's built-in default; Debian's config turns it "
    "on) never saves. A session over `max_queued_messages` (1000) has the message PUBACKed and dropped")

TOPOLOGY = {
    Topology.DECLARE_QUEUE: emulated(
        "a persistent session (fixed client id, clean start off) subscribed to the topic, and one to its "
        "dead-letter topic"),
    Topology.DELETE_QUEUE: emulated("a clean-start connect as the session's client id discards it"),
    Topology.PURGE_QUEUE: emulated("the session is discarded and created again, empty (count not told)"),
    Topology.INSPECT_QUEUE: emulated(
        "CONNACK session-present of the session's client id: exists or not, no depth or consumers; a "
        "consumer using that session at that moment is taken over and reconnects"),
}

#: consume() and declare_queue() take MQTT topic filters (both protocol versions).
SOURCE_PATTERNS = (
    "MQTT topic filters: '+' matches one level, '#' the rest (e.g. 'sensors/+/temp', 'sensors/#'); the filter's "
    "persistent session (id derived from the filter, or client_id) subscribes to it, so it keeps what matches "
    "while no consumer runs; delivery.source is the filter and delivery.routing_key the topic; requeue and reject "
    "copies go to the message's own topic (or retry_topic / dead_letter_topic built from it)")

REJECT_V5 = RejectOutcome(
    RejectFate.DEAD_LETTERS,
    "a copy is published (QoS 1) to dead_letter_topic and the original PUBACKed once the broker confirms it; "
    "where no session or subscriber holds that topic the broker answers 0x10 (no matching subscribers): the "
    "copy counts as refused and the original stays unacked (redelivered after a reconnect), never discarded. "
    "declare_queue(dead_letter=True), the default, makes a session that holds it")
REJECT_V311 = RejectOutcome(
    RejectFate.DEAD_LETTERS_IF_TARGET,
    "the body is published (QoS 1) to dead_letter_topic, then the original PUBACKed; a 3.1.1 PUBACK cannot say "
    "whether anyone holds that topic, so without a session (declare_queue's default dead_letter=True makes one) "
    "or a subscriber the copy is DISCARDED")

#: ackbridge.pipeline's back-off (tests/pipeline/test_redelivery_mqtt.py, test_killed_consumer.py).
RETRY_V5 = emulated(
    "a confirmed QoS 1 copy per retry, to the topic QUEUE.retry.<level> with its attempt count, due time and "
    "original queue as user properties, then the original is PUBACKed; per back-off level the pipeline declares "
    "a persistent session for that topic (and one for its /dlq topic), and runs a pump consumer (one more "
    "session and connection, Receive Maximum 1) that holds the head copy unacked until it is due, publishes it "
    "back to QUEUE (confirmed) and only then PUBACKs it: each retry costs two confirmed publishes. A copy held "
    "when the consumer dies stays in its session and comes back, attempt count kept, to the next pipeline. "
    "Session ids derive from the topics, so one pipeline per queue at a time (a second takes the sessions over), "
    "and Mosquitto drops copies past max_queued_messages (1000) waiting at one level")
RETRY_V311 = emulated(
    "MQTT 3.1.1 carries the body only, so no copy could carry an attempt count: ackbridge.pipeline holds the "
    "failed delivery un-PUBACKed and runs the handler on it again when its back-off is due (the handler reads "
    "the attempt in ackbridge-retry-attempt). Acks leave in order, so the deliveries after a held one are "
    "PUBACKed once it is settled. The count lives in the consumer: a delivery the session gives back after a "
    "reconnect comes again as attempt 1. After the last attempt the failure headers cannot travel: the "
    "header-carrying dead-letter copy is refused before sending and the original is rejected, its body alone "
    "going to dead_letter_topic (tests/pipeline/test_held_retry.py; protocol=5 carries them)")

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
                                     "0x97 quota exceeded) or 0x10 (no matching subscribers: no session "
                                     "holds the topic, the message went nowhere); a PUBLISH over the "
                                     "CONNACK's Maximum Packet Size (Mosquitto max_packet_size) is refused "
                                     "before sending; Mosquitto 2.0's "
                                     "message_size_limit is not told: it drops the connection (unknown)"),
        Verb.DELIVERY_COUNT: emulated(
            "lower bound: ackbridge-attempt user property carried by requeued copies, +1 if the dup flag "
            "is set (the broker does not count)"),
        Verb.LABELLED_ACKS: native("replies to a per-connection response topic with correlation data"),
    },
    ordered_acks=True,
    notes=_COMMON_NOTES,
    max_prefetch=MAX_RECEIVE_MAXIMUM,
    topology=TOPOLOGY,
    confirm_durability=DURABILITY,
    reject_outcome=REJECT_V5,
    source_patterns=SOURCE_PATTERNS,
    delayed_retry=RETRY_V5,
    requeue_bound=("consume(max_deliveries=N) dead-letters a message delivered more than N times (the attempt "
                   "count travels with each requeued copy); retry_topic sends requeued copies to another topic"),
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
        Verb.CONFIRM_REFUSED: unsupported("MQTT 3.1.1 PUBACK carries no reason code: refusals are invisible "
                                          "(Mosquitto PUBACKs and drops a message over message_size_limit)"),
        Verb.DELIVERY_COUNT: unsupported(
            "MQTT 3.1.1 has only the dup flag and no user properties to carry a count"),
        Verb.LABELLED_ACKS: unsupported(
            "MQTT 3.1.1 has no response topic, correlation data or user properties (use protocol=5)"),
    },
    # No max_prefetch: 3.1.1 has no Receive Maximum, prefetch is not sent at all.
    ordered_acks=True,
    notes=(*_COMMON_NOTES, "MQTT 3.1.1 messages carry the body only: headers and message ids are dropped"),
    topology=TOPOLOGY,
    confirm_durability=DURABILITY,
    reject_outcome=REJECT_V311,
    source_patterns=SOURCE_PATTERNS,
    delayed_retry=RETRY_V311,
    retry_method=RetryMethod.HOLDING,
    requeue_bound=("MQTT 3.1.1 carries no delivery count, so max_deliveries is unsupported: reject a message "
                   "that was redelivered (delivery.redelivered) instead of requeueing it, or use protocol=5 and "
                   "consume(max_deliveries=N)"),
)
