"""What the RabbitMQ plugin declares it can do, as data: one set per queue type.

Classic and quorum queues differ only in the delivery count (quorum queues'
``x-delivery-count``), the confirm durability and the requeue bound; the
transport takes :data:`QUORUM` when ``queue_type=quorum``.
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
    unsupported,
)

_COMMON_VERBS = {
    Verb.ACK: native("basic.ack on the subscription's own channel"),
    Verb.REQUEUE: native("basic.nack requeue=true"),
    Verb.REJECT: native("basic.reject requeue=false; dead-lettered to QUEUE.dlq when declared with dead_letter, "
                        "else discarded unless the queue has a dead-letter exchange of its own or by policy"),
    Verb.CUMULATIVE_ACK: native("basic.ack multiple=true (one channel per subscription, so tags never mix)"),
    Verb.CONFIRM: native("publisher confirms streamed on a dedicated channel, multiple honoured"),
    Verb.CONFIRM_REFUSED: native("Basic.Nack, and Basic.Return of mandatory publishes (unroutable)"),
    Verb.LABELLED_ACKS: emulated("replies go to an exclusive per-connection reply queue, consumed with auto-ack"),
}

TOPOLOGY = {
    Topology.DECLARE_QUEUE: native("queue.declare durable; with dead_letter also QUEUE.dlx (fanout) and QUEUE.dlq"),
    Topology.DELETE_QUEUE: native("queue.delete (and QUEUE.dlq, QUEUE.dlx)"),
    Topology.PURGE_QUEUE: native("queue.purge: ready messages; unacked ones stay with their consumer"),
    Topology.INSPECT_QUEUE: native("queue.declare passive: ready messages and consumers (unacked: not told)"),
}

#: How ackbridge.pipeline delays a retry: queue-declare arguments (x-message-ttl, x-dead-letter-*) are out of
#: the public declare_queue's reach, so the delay is the pipeline's, not the broker's TTL.
DELAYED_RETRY = emulated(
    "ackbridge.pipeline: a confirmed copy in QUEUE.retry.<level> (a durable queue per back-off level, as "
    "kombu's delay levels), moved back to QUEUE by the pipeline when due, then acked; the attempt count travels "
    "in ackbridge-retry-attempt. Native TTL delay queues (x-message-ttl + dead-lettering back) need a declare seam "
    "(docs/failure-policy.md) (tests/pipeline)")

#: What basic.reject requeue=false does: the queue's dead-letter exchange decides.
REJECT_OUTCOME = RejectOutcome(
    RejectFate.DEAD_LETTERS_IF_TARGET,
    "to the queue's dead-letter exchange (declare_queue's default dead_letter=True: QUEUE.dlx -> QUEUE.dlq; or "
    "an x-dead-letter-exchange argument or policy set elsewhere); a queue without one DISCARDS the message. "
    "consume() warns when it can tell (declared here with dead_letter=False, or no QUEUE.dlq companion)")

#: basic.qos prefetch_count is a 16-bit field (pika fails to encode a larger one
#: inside its I/O loop, which would end the connection).
MAX_PREFETCH = 65535

_TRANSIENT = ("; persistent=False, or a queue declared elsewhere as non-durable, is confirmed in memory only "
              "(gone with a broker restart)")
#: What a confirm means on a classic queue: RabbitMQ confirms a persistent message routed to a
#: durable queue once it is written and fsynced (fsyncs are batched; confirms wait for them).
CLASSIC_DURABILITY = ConfirmDurability(
    Durability.ON_DISK,
    "persistent=True (the default: delivery_mode 2) to a durable queue (declare_queue makes them durable): "
    "Basic.Ack once RabbitMQ has written and fsynced the message (batched fsync)" + _TRANSIENT)
QUORUM_DURABILITY = ConfirmDurability(
    Durability.REPLICATED,
    "Basic.Ack once a majority of the quorum queue's members have written and fsynced it (a single-node "
    "broker: that node's disk); survives losing a minority of nodes")

#: AMQP 0-9-1 has no way to push back consumer_timeout: extend() refuses, saying so.
LEASE = unsupported(
    "AMQP 0-9-1 has no lease to extend: the broker's consumer_timeout (rabbitmq.conf, default 30 min) counts from "
    "delivery and nothing resets it; a delivery held longer makes the broker close its channel and requeue every "
    "unsettled delivery on it: ackbridge logs that as a 'consumer_timeout' warning, ends the generation (so "
    "settling those deliveries raises StaleDeliveryError) and consumes again; set consumer_timeout above the "
    "slowest work")

CLASSIC = Capabilities(
    broker="rabbitmq",
    verbs={
        **_COMMON_VERBS,
        Verb.DELIVERY_COUNT: unsupported(
            "classic queues only carry the redelivered flag; use queue_type=quorum for x-delivery-count"),
    },
    notes=("queue_type=classic",),
    max_prefetch=MAX_PREFETCH,
    topology=TOPOLOGY,
    confirm_durability=CLASSIC_DURABILITY,
    reject_outcome=REJECT_OUTCOME,
    lease_extension=LEASE,
    delayed_retry=DELAYED_RETRY,
    requeue_bound=(
        "classic queues count no deliveries, so consume(max_deliveries=N) needs queue_type=quorum (which also "
        "offers delivery_limit=N, the broker's x-delivery-limit); on a classic queue reject instead of requeueing "
        "a message that was redelivered (delivery.redelivered)"),
)

QUORUM = Capabilities(
    broker="rabbitmq",
    verbs={**_COMMON_VERBS, Verb.DELIVERY_COUNT: native("quorum queues' x-delivery-count header (+1)")},
    notes=("queue_type=quorum",),
    max_prefetch=MAX_PREFETCH,
    topology=TOPOLOGY,
    confirm_durability=QUORUM_DURABILITY,
    reject_outcome=REJECT_OUTCOME,
    lease_extension=LEASE,
    delayed_retry=DELAYED_RETRY,
    requeue_bound=("consume(max_deliveries=N) dead-letters a message delivered more than N times; or "
                   "delivery_limit=N (x-delivery-limit: the broker dead-letters it, or drops it without a "
                   "dead-letter target)"),
)


def capabilities_for(quorum: bool) -> Capabilities:
    """The capabilities of a transport whose queues are quorum queues or classic ones."""
    return QUORUM if quorum else CLASSIC
