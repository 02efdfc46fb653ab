"""Names and arguments on the wire: queues, their dead-letter companions, destinations (no I/O).

AMQP 0-9-1 names are short strings; pika raises on a longer one only inside
its I/O loop, which ends the whole connection, so every name is checked here,
before anything is queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ackbridge.capabilities import CANNOT_TELL, DeadLetter, DeadLetterTarget
from ackbridge.errors import AckbridgeError, BrokerError, InvalidOptionError
from ackbridge_rabbitmq.options import RabbitSettings


def parse_destination(destination: str) -> tuple[str, str]:
    """``"queue"`` -> default exchange, routing key = queue; ``"exchange/key"``
    -> that exchange and routing key; ``"/name"`` -> default exchange (for queue
    names that themselves contain '/')."""
    exchange, sep, key = destination.partition("/")
    if not sep:
        exchange, key = "", destination
    if len(destination) > 63:  # only long names can pass 255 UTF-8 bytes
        check_name(exchange, "exchange")
        check_name(key, "routing key")
    return exchange, key


def check_name(name: str, what: str = "queue name") -> str:
    """AMQP 0-9-1 names are short strings (at most 255 bytes). pika raises on a
    longer one only inside its I/O loop, which ends the whole connection (and a
    queued publish would end every reconnect too): refuse it up front."""
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > 255:
        raise InvalidOptionError(f"{what} {name[:40]!r}... is {size} bytes; AMQP 0-9-1 allows at most 255")
    return name


def check_queue_name(queue: str) -> str:
    """A queue ackbridge declares or consumes by name: an empty name would make
    RabbitMQ invent one (amq.gen-...) that nobody can find again."""
    if not queue:
        raise InvalidOptionError("a queue name must not be empty (RabbitMQ would generate one)")
    return check_name(queue)


def dead_letter_names(queue: str) -> tuple[str, str]:
    """(exchange, queue) that receive *queue*'s rejected messages."""
    check_queue_name(queue)
    return check_name(f"{queue}.dlx", "dead-letter exchange name"), check_name(f"{queue}.dlq", "dead-letter queue name")


def queue_arguments(queue: str, settings: RabbitSettings, *, dead_letter: bool) -> dict[str, Any]:
    check_queue_name(queue)
    args: dict[str, Any] = {}
    if settings.quorum:
        args["x-queue-type"] = "quorum"
        if settings.delivery_limit is not None:
            args["x-delivery-limit"] = settings.delivery_limit
    if dead_letter:
        args["x-dead-letter-exchange"] = dead_letter_names(queue)[0]
    return args


def dead_letter_queue_arguments(settings: RabbitSettings) -> dict[str, Any]:
    return {"x-queue-type": "quorum"} if settings.quorum else {}


# ---- where a rejected message goes (one rule for the pika and the aio-pika transports) ----
# AMQP 0-9-1 cannot read a queue's arguments or policies, so the answer comes from what
# ackbridge made: the queue as this connection declared it, else whether its companion
# QUEUE.dlq exists (passive declares of the queue, then the companion).
def dead_letter_by_declare(source: str, declared: bool | None) -> DeadLetterTarget | None:
    """What this connection's own declare of *source* says; None when it did not declare
    it (then the broker is asked, and :func:`dead_letter_by_lookup` reads the answer)."""
    dlx, dlq = dead_letter_names(source)
    if declared is False:
        return DeadLetterTarget(DeadLetter.NONE, "this connection declared it with dead_letter=False; only a "
                                "policy could give it a dead-letter exchange")
    if declared:
        return DeadLetterTarget(DeadLetter.KNOWN, f"{dlq!r} through exchange {dlx!r}")
    return None


def dead_letter_by_lookup(source: str, seen: Sequence[str], error: AckbridgeError | None) -> DeadLetterTarget:
    """The answer of the passive declares: *seen* the names found, *error* how the lookup
    failed (None: the queue and its companion both exist)."""
    _, dlq = dead_letter_names(source)
    if error is None:
        return DeadLetterTarget(DeadLetter.KNOWN, f"{dlq!r} (the companion ackbridge declares)")
    if isinstance(error, BrokerError) and error.code == 404 and list(seen) == [source]:
        return DeadLetterTarget(DeadLetter.NONE, f"it has no dead-letter companion {dlq!r}; a dead-letter "
                                "exchange its declarer or a policy set, which AMQP 0-9-1 cannot read, would "
                                "still apply")
    return CANNOT_TELL
