"""What the embedded broker can do, as data."""

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

CAPABILITIES = Capabilities(
    broker="embedded",
    verbs={
        Verb.ACK: native("row deleted in one SQLite transaction"),
        Verb.REQUEUE: native("lease released; the message keeps its place"),
        Verb.REJECT: native("moved to QUEUE.dlq (queues dead-letter unless declared otherwise)"),
        Verb.CUMULATIVE_ACK: emulated("individual acks in one transaction"),
        Verb.CONFIRM: native("after the transaction commits (fsync unless fsync=false)"),
        Verb.CONFIRM_REFUSED: native("message larger than max_message_bytes, or the write failed (e.g. disk full)"),
        Verb.DELIVERY_COUNT: native("counted on every lease"),
        Verb.LABELLED_ACKS: native("replies go to a per-connection inbox queue"),
    },
    notes=("local default for one machine; not a production broker",),
    confirm_durability=ConfirmDurability(
        Durability.ON_DISK,
        "confirmed after the SQLite transaction (WAL) commits and is fsynced (group commit); with fsync=false "
        "it is written to the operating system only: survives a process kill, not a power loss"),
    topology={
        Topology.DECLARE_QUEUE: native("a row in the file's queues table (QUEUE.dlq beside it)"),
        Topology.DELETE_QUEUE: native("its rows (and QUEUE.dlq's) deleted in one transaction"),
        Topology.PURGE_QUEUE: native("ready rows deleted; leased ones stay with their consumer"),
        Topology.INSPECT_QUEUE: native("ready and leased rows counted; consumers are not tracked"),
    },
    reject_outcome=RejectOutcome(
        RejectFate.DEAD_LETTERS_IF_TARGET,
        "moved to QUEUE.dlq, in the same transaction; a queue declared with dead_letter=False DISCARDS it "
        "(deleted), which consume() warns about"),
    lease_extension=native(
        "a lease belongs to the connection's owner record, which its heartbeat thread renews every "
        "lease_timeout/4 (2 s at most), so slow work keeps its lease while the process lives; extend() renews "
        "it now, confirms this connection still holds it (StaleDeliveryError if it was taken over) and returns "
        "lease_timeout"),
    delayed_retry=emulated("ackbridge.pipeline: a confirmed copy in QUEUE.retry.<level> (one queue per back-off "
                           "level), moved back to QUEUE by the pipeline when due, then acked; the attempt count "
                           "travels in ackbridge-retry-attempt (tests/pipeline)"),
    requeue_bound=("consume(max_deliveries=N) dead-letters a message leased more than N times (the file counts "
                   "every lease); or reject it instead of requeueing it"),
)
