"""What RabbitMQ streams can do, as data.

A stream is a log: a message is never removed by a consumer, so "settling"
one means moving the consumer's stored offset past it. That is a cumulative
ack by nature; a single message can be neither put back nor dead-lettered.
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

#: Deliveries unsettled per consumer are bounded here, not by the broker (its credit counts
#: chunks): no protocol field limits the number; this keeps a window sane.
MAX_PREFETCH = 65535

DURABILITY = ConfirmDurability(
    Durability.WRITTEN,
    "confirmed once the stream's leader wrote the chunk and a majority of its members (one on a single "
    "node) have it; streams do not fsync each write: a broker kill keeps it, a power loss of a single node "
    "may not (more members make it replicated)")

_LOG = ("a stream is an append-only log: one message cannot be taken out of it, put back at its head or "
        "moved elsewhere; a consumer only moves its stored offset")

CAPABILITIES = Capabilities(
    broker="rabbitmq-streams",
    verbs={
        Verb.ACK: emulated("marks the delivery done; the consumer's offset is stored on the broker (StoreOffset) "
                           "once every delivery before it is done too (highest contiguous ack)"),
        Verb.REQUEUE: unsupported(_LOG + "; an unacked message comes again after a reconnect or to the next "
                                  "consumer with the same reference, which resume from the stored offset"),
        Verb.REJECT: unsupported(_LOG + "; a stream has no dead-letter target"),
        Verb.CUMULATIVE_ACK: native("StoreOffset: the consumer's reference stores the last offset processed"),
        Verb.CONFIRM: native("publisher confirm per publishing id from the stream's leader; a named publisher "
                             "(publisher_name) is de-duplicated: a publishing id at or below the highest one "
                             "the broker stored for that name is confirmed without being stored again"),
        Verb.CONFIRM_REFUSED: native("PublishError from the broker (missing stream, access refused, a "
                                     "publisher the broker does not know) or a record above the frame size "
                                     "(refused before sending)"),
        Verb.DELIVERY_COUNT: unsupported("a stream does not count deliveries (every read is a new one)"),
        Verb.LABELLED_ACKS: unsupported("no reply address on the stream protocol"),
    },
    notes=(
        "a queue is a stream (declare_queue creates one, x-queue-type=stream); consume(..., offset=first|last|"
        "next|<n>) chooses where a consumer without a stored offset starts",
        "prefetch is exact: the broker's credit counts chunks (one chunk may hold thousands of messages), so one "
        "chunk is asked for at a time and its records are handed out only while fewer than prefetch are "
        "unsettled",
        "an ack moves the stored offset only once every earlier delivery is acked too (a gap holds it back); "
        "the offset is stored under the consumer's reference (option reference), visible to every stream client",
        "redelivered is set for what this connection handed out before a reconnect; a new connection cannot "
        "know what an earlier one was handed",
        "on 3.10, super streams (3.11+) are not served: several plain streams serve as partitions",
    ),
    ordered_acks=True,
    max_prefetch=MAX_PREFETCH,
    topology={
        Topology.DECLARE_QUEUE: native("Create (stream), an existing stream is kept"),
        Topology.DELETE_QUEUE: native("Delete (stream and its messages)"),
    },
    confirm_durability=DURABILITY,
    reject_outcome=RejectOutcome(RejectFate.NO_REJECT, _LOG + "; reject is unsupported (it raises)"),
    delayed_retry=emulated(
        "a stream keeps every message (acks are offsets), so there is no queue to move a copy out of: "
        "ackbridge.pipeline holds the failed delivery unsettled (the stored offset cannot pass it) and runs the "
        "handler on it again when its back-off is due; the handler reads the attempt in ackbridge-retry-attempt. "
        "The count lives in the consumer: after a restart the stream is read again from the stored offset and "
        "the message comes as attempt 1. After the last attempt a confirmed copy with the failure headers goes to "
        "the dead-letter stream (QUEUE.dlq unless named; declare it), then the offset moves past the original "
        "(tests/pipeline/test_held_retry.py)"),
    retry_method=RetryMethod.HOLDING,
    requeue_bound="requeue is unsupported on a stream (it raises), so no requeue loop can form",
)
