"""What NATS JetStream can do, as data.

JetStream settles each delivery on its own reply subject, so there is no
cumulative ack and no order to keep; dead-lettering is emulated (JetStream
only *stops* redelivering a terminated message, it stores it nowhere else).
"""

from __future__ import annotations

from ackbridge.capabilities import (
    Capabilities,
    ConfirmDurability,
    Durability,
    RejectFate,
    RejectOutcome,
    Topology,
    Verb,
    emulated,
    native,
)

#: max_ack_pending is a signed 32-bit field in nats-server's consumer config.
MAX_ACK_PENDING = 2**31 - 1

#: JetStream PubAcks once the stream stored the message; the file store fsyncs on a timer.
DURABILITY = ConfirmDurability(
    Durability.WRITTEN,
    "PubAck once the stream stored it: file storage has written it to its block file (survives a "
    "nats-server kill) and fsyncs every `sync_interval` (default 2 min; `sync_interval: always` fsyncs "
    "each write, on disk before the PubAck); a stream with replicas > 1 PubAcks once a quorum stored it "
    "(replicated); memory storage: in memory only")

CAPABILITIES = Capabilities(
    broker="nats-jetstream",
    verbs={
        Verb.ACK: native("+ACK published to the delivery's reply subject ($JS.ACK...)"),
        Verb.REQUEUE: native("-NAK to the reply subject: redelivered at once, or after requeue_delay seconds "
                             "(-NAK {\"delay\": ...}); the delivery count rises"),
        Verb.REJECT: emulated(
            "republished (JetStream publish, PubAck awaited) to dead_letter_subject with the source stream, "
            "sequence and delivery count as headers, then +TERM (JetStream stops redelivering it); if the "
            "dead-letter publish fails the delivery is -NAKed instead, never lost"),
        Verb.CUMULATIVE_ACK: emulated("one +ACK per delivery (JetStream's AckAll is a consumer policy, not a "
                                      "per-ack choice)"),
        Verb.CONFIRM: native("PubAck from the stream (the publish is a request); Nats-Msg-Id from message_id: "
                             "a retransmit within the stream's duplicate_window is stored once (PubAck "
                             "duplicate=true, reported confirmed with reason 'duplicate')"),
        Verb.CONFIRM_REFUSED: native("no stream for the subject (503 no responders), a JetStream API error in "
                                     "the PubAck (limits, wrong expected stream...), or a body above the "
                                     "server's max_payload (refused before sending)"),
        Verb.DELIVERY_COUNT: native("num_delivered from the delivery's reply subject (JetStream metadata)"),
        Verb.LABELLED_ACKS: native("replies are requests to a per-connection inbox subject that answers each "
                                   "one (so a reply is confirmed when the publisher's inbox received it)"),
    },
    notes=(
        "a queue is a subject + a stream named after it + the durable pull consumer 'durable' (ackbridge)",
        "prefetch is the consumer's pull credit (never more in flight to one ackbridge consumer) and the "
        "durable consumer's max_ack_pending (shared by every consumer of the durable; the last subscribe sets it)",
        "an unsettled delivery of a closed consumer or an ended generation is -NAKed so it comes back at once; "
        "one lost with its process comes back after ack_wait",
        "an old reply subject still acks the same stream sequence after a reconnect (never another message): "
        "the core's generation rule refuses such settlements anyway",
    ),
    max_prefetch=MAX_ACK_PENDING,
    confirm_durability=DURABILITY,
    # A copy no stream stores is -NAKed, never discarded: without a dead-letter stream a
    # poison message loops like a requeue instead.
    reject_outcome=RejectOutcome(RejectFate.DEAD_LETTERS,
                                 "copy to dead_letter_subject (PubAck awaited), then +TERM; a copy no stream stores "
                                 "is -NAKed instead, never discarded"),
    delayed_retry=emulated(
        "ackbridge.pipeline: a confirmed copy (its own Nats-Msg-Id, QUEUE~N) in the stream QUEUE.retry.<level>, "
        "moved back when due; JetStream's native -NAK with delay is per connection here (requeue_delay), not "
        "per delivery, so the pipeline cannot reach it yet (tests/pipeline)"),
    requeue_bound=("consume(max_deliveries=N) dead-letters a message delivered more than N times (num_delivered "
                   "is native); requeue_delay=S spaces the redeliveries (it slows the loop, it does not end it); "
                   "the max_deliver option stops delivering without dead-lettering"),
    topology={
        Topology.DECLARE_QUEUE: native("a work-queue stream named after the subject, its durable pull consumer, "
                                       "and a limits-retention dead-letter stream"),
        Topology.DELETE_QUEUE: native("deletes the stream declare_queue made (its consumers go with it) and its "
                                      "dead-letter stream; a stream storing other subjects too is refused"),
        Topology.PURGE_QUEUE: native("drops every message the stream stores, delivered-and-unacked ones too "
                                     "(JetStream stores no ready/unacked split); returns the count"),
        Topology.INSPECT_QUEUE: native("the durable consumer's num_pending (messages) and num_ack_pending "
                                       "(unacked), the dead-letter stream's message count"),
    },
    lease_extension=native(
        "+WPI to the delivery's reply subject (nats-py's Msg.in_progress()): JetStream starts its ack_wait "
        "again; extend() returns ack_wait (seconds). Without it a delivery held past ack_wait is delivered "
        "again (to this or another consumer): reported as a lapsed lease (warning, ackbridge.leases_lapsed)"),
    connection_free_acks=native(
        "the handle is the delivery's reply subject ($JS.ACK...): +ACK or -NAK published to it from any "
        "connection settles the delivery while JetStream holds it pending (until ack_wait); a late or "
        "repeated one acks the same stream sequence or nothing, never another message"),
)
