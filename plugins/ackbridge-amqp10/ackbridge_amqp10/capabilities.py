"""The verb tables of the AMQP 1.0 adapter, chosen by the ``peer`` option.

The wire behaviour is the same for every peer; only what can be *observed*
differs. RabbitMQ 3.10's plugin accepts every publish (even unroutable ones)
and never raises the delivery-count, so those verbs are declared as gaps
there. ``peer=generic`` declares what the AMQP 1.0 protocol itself gives.
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

_COMMON = {
    Verb.ACK: native("accepted outcome"),
    Verb.REJECT: native("rejected outcome; the broker dead-letters it if the queue has a dead-letter target "
                        "(RabbitMQ: x-dead-letter-exchange argument or policy), otherwise drops it"),
    Verb.CUMULATIVE_ACK: emulated("AMQP 1.0 settles deliveries one by one: each is accepted individually, "
                                  "in one batch on the container thread"),
    Verb.CONFIRM: native("accepted outcome on the sender link"),
    Verb.LABELLED_ACKS: native("replies go to a per-connection inbox link (reply-to + correlation-id); on "
                               "RabbitMQ the queue ackbridge.reply.<id>, which 3.10 never deletes "
                               "(an `expires` policy must)"),
}

_NO_MANAGEMENT = "AMQP 1.0 has no queue management: do it on the broker (RabbitMQ: its management API or CLI)"
#: What AMQP 1.0 can do to topology: make the broker create a queue by attaching to its address.
TOPOLOGY = {
    Topology.DECLARE_QUEUE: emulated("a sender attached to the queue's address (the broker creates it); "
                                     "dead_letter=False only"),
    Topology.DELETE_QUEUE: unsupported(_NO_MANAGEMENT),
    Topology.PURGE_QUEUE: unsupported(_NO_MANAGEMENT),
    Topology.INSPECT_QUEUE: unsupported(_NO_MANAGEMENT),
}

#: RabbitMQ 3.10's AMQP 1.0 plugin publishes an unsettled transfer through a confirm-mode channel
#: and sends 'accepted' on the confirm: the same write as a 0-9-1 confirm.
RABBITMQ_DURABILITY = ConfirmDurability(
    Durability.ON_DISK,
    "'accepted' comes with RabbitMQ's publisher confirm: a durable message (persistent=True, the default) "
    "to a durable queue (/amq/queue/NAME of a queue declared durable) is written and fsynced first; "
    "/queue/NAME declares a NON-durable queue in 3.10 and persistent=False is in memory only "
    "(gone with a broker restart); quorum queues: replicated on a majority")
GENERIC_DURABILITY = ConfirmDurability(
    Durability.NOT_TOLD,
    "AMQP 1.0 says only that the peer accepted the message; what it wrote first is the broker's own "
    "(see its documentation)")

#: The rejected outcome: the broker decides where it goes.
REJECT_OUTCOME = RejectOutcome(
    RejectFate.DEAD_LETTERS_IF_TARGET,
    "the rejected outcome; the broker dead-letters it where the queue has a dead-letter target (RabbitMQ: an "
    "x-dead-letter-exchange argument or policy) and DISCARDS it otherwise; AMQP 1.0 cannot read a queue's "
    "configuration, so consume() cannot tell which")


#: AMQP 1.0 cannot declare the pipeline's delay queues (no queue management), so the
#: pipeline holds a failed delivery unsettled until its next attempt is due.
HELD_RETRY = emulated(
    "ackbridge.pipeline holds the failed delivery unsettled (the broker keeps it, no copy is made) and runs the "
    "handler on it again when its back-off is due; the handler reads the attempt in ackbridge-retry-attempt. "
    "The count lives in the consumer: a delivery released by a closed or cut link comes again as attempt 1. "
    "After the last attempt, a confirmed copy with the failure headers goes to the dead-letter address, then "
    "the original is accepted (tests/pipeline/test_held_retry.py)")

RABBITMQ = Capabilities(
    broker="amqp10",
    verbs={
        **_COMMON,
        Verb.REQUEUE: native("released outcome (delivered=False): modified would end the session on RabbitMQ "
                            "< 3.10.11; modified(delivery-failed) is used only when the broker is known to be safe"),
        Verb.CONFIRM_REFUSED: unsupported(
            "RabbitMQ 3.10's AMQP 1.0 plugin answers every publish 'accepted', even unroutable ones and "
            "publishes to a missing /amq/queue/NAME; a refusal is never observed"),
        Verb.DELIVERY_COUNT: unsupported(
            "RabbitMQ 3.10 sends first-acquirer only (redelivered is reported), never a delivery-count"),
    },
    notes=(
        "peer=rabbitmq (default): declares the gaps of RabbitMQ 3.10's AMQP 1.0 plugin",
        "no queue management in AMQP 1.0: declare_queue(dead_letter=True) is unsupported",
    ),
    topology=TOPOLOGY,
    confirm_durability=RABBITMQ_DURABILITY,
    reject_outcome=REJECT_OUTCOME,
    delayed_retry=HELD_RETRY,
    retry_method=RetryMethod.HOLDING,
    requeue_bound=("RabbitMQ 3.10 sends no delivery count over AMQP 1.0, so max_deliveries is unsupported: "
                   "reject a message that was redelivered (delivery.redelivered) instead of requeueing it, or "
                   "consume a quorum queue created with x-delivery-limit (and a dead-letter target)"),
)

GENERIC = Capabilities(
    broker="amqp10",
    verbs={
        **_COMMON,
        Verb.REQUEUE: native("modified outcome with delivery-failed=true (the broker counts the attempt); "
                            "released if the peer is a RabbitMQ older than 3.10.11"),
        Verb.CONFIRM_REFUSED: native("rejected, released or modified outcome, with the broker's error condition"),
        Verb.DELIVERY_COUNT: native("header delivery-count + 1 (the delivery-count counts failed attempts)"),
    },
    notes=(
        "peer=generic: any AMQP 1.0 broker that reports outcomes and the message header",
        "no queue management in AMQP 1.0: declare_queue(dead_letter=True) is unsupported",
    ),
    topology=TOPOLOGY,
    confirm_durability=GENERIC_DURABILITY,
    reject_outcome=REJECT_OUTCOME,
    delayed_retry=HELD_RETRY,
    retry_method=RetryMethod.HOLDING,
    requeue_bound=("consume(max_deliveries=N) dead-letters a message delivered more than N times (the "
                   "header's delivery-count); or reject it instead of requeueing it"),
)


def for_peer(peer: str) -> Capabilities:
    return GENERIC if peer == "generic" else RABBITMQ
