"""I/O-free pieces of the RabbitMQ transport: options, capabilities, destinations, properties.

Capabilities, options, the destination syntax, queue arguments, TLS and the
mapping of message properties live here once, so both sides behave alike.
"""

from __future__ import annotations

import ssl
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge.options import CONNECTION_OPTIONS, OptionSpec, positive_int
from ackbridge.urls import BrokerURL

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
    requeue_bound=("consume(max_deliveries=N) dead-letters a message delivered more than N times; or "
                   "delivery_limit=N (x-delivery-limit: the broker dead-letters it, or drops it without a "
                   "dead-letter target)"),
)

QUEUE_TYPES = ("classic", "quorum")

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("queue_type", str, "classic", "type of queues declare_queue() creates (classic|quorum)",
               lambda v: v in QUEUE_TYPES, "must be 'classic' or 'quorum'"),
    positive_int("delivery_limit", None, "quorum queues: x-delivery-limit (broker-side poison limit)",
                 nullable=True),
)

def option(options: Mapping[str, Any], name: str) -> Any:
    for spec in (*CONNECTION_OPTIONS, *OPTIONS):
        if spec.name == name:
            return options.get(name, spec.default)
    raise KeyError(name)


def connection_name() -> str:
    """A unique name the broker shows (rabbitmqctl list_connections client_properties);
    lets tests find one connection."""
    return f"ackbridge-{uuid.uuid4().hex[:16]}"


def capabilities_for(options: Mapping[str, Any]) -> Capabilities:
    return QUORUM if option(options, "queue_type") == "quorum" else CLASSIC


# ---- destinations ------------------------------------------------------------
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


# ---- connection parameters ------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    vhost: str
    username: str
    password: str
    tls: ssl.SSLContext | None


def endpoint(url: BrokerURL, options: Mapping[str, Any]) -> Endpoint:
    tls = url.scheme == "amqps"
    vhost = url.path[1:] if url.path.startswith("/") else url.path
    return Endpoint(
        host=url.host or "localhost",
        port=url.port or (5671 if tls else 5672),
        vhost=vhost or "/",
        username=url.username or "guest",
        password=url.password_text or "guest",
        tls=tls_context(options) if tls else None,
    )


def tls_context(options: Mapping[str, Any]) -> ssl.SSLContext:
    """Verify certificates by default; an explicit tls_verify=false warns. A client
    certificate (tls_cert_file, with tls_key_file unless the key is in it) is offered
    to brokers that ask for one."""
    ca_file = option(options, "tls_ca_file")
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidOptionError(f"option 'tls_ca_file' could not be loaded: {exc}") from None
    cert_file, key_file = option(options, "tls_cert_file"), option(options, "tls_key_file")
    if key_file is not None and cert_file is None:
        raise InvalidOptionError("option 'tls_key_file' needs 'tls_cert_file' (the client certificate)")
    if cert_file is not None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidOptionError(f"options 'tls_cert_file'/'tls_key_file' could not be loaded: {exc}") from None
    if not option(options, "tls_verify"):
        warnings.warn("amqps with tls_verify=false: the broker's certificate is NOT verified",
                      UserWarning, stacklevel=4)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


# ---- queues -----------------------------------------------------------------------
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


def queue_arguments(queue: str, options: Mapping[str, Any], *, dead_letter: bool) -> dict[str, Any]:
    check_queue_name(queue)
    args: dict[str, Any] = {}
    if option(options, "queue_type") == "quorum":
        args["x-queue-type"] = "quorum"
        limit = option(options, "delivery_limit")
        if limit is not None:
            args["x-delivery-limit"] = limit
    if dead_letter:
        args["x-dead-letter-exchange"] = dead_letter_names(queue)[0]
    return args


def dead_letter_queue_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    return {"x-queue-type": "quorum"} if option(options, "queue_type") == "quorum" else {}


# ---- messages ------------------------------------------------------------------------
def property_fields(message: OutboundMessage, message_id: str) -> dict[str, Any]:
    """Keyword arguments for pika.BasicProperties.

    Called before the publish is queued, so a header the wire cannot carry is an
    InvalidOptionError for this publish alone."""
    if message.headers:
        for key, value in message.headers.items():
            if isinstance(value, float):
                # pika's table encoder has no float: it raised inside the I/O loop,
                # after the confirm tracker had counted the publish, which shifted
                # every later confirm onto the wrong message.
                raise InvalidOptionError(
                    f"header {key!r} holds a float, which the RabbitMQ plugin cannot send (pika has no "
                    "float field type); send it as a string or an int")
    return {
        "headers": dict(message.headers) if message.headers else None,
        "message_id": message_id,
        "correlation_id": message.correlation_id,
        "reply_to": message.reply_to,
        "content_type": message.content_type,
        "timestamp": int(message.timestamp) if message.timestamp is not None else None,
        "delivery_mode": 2 if message.persistent else 1,
    }


def delivery_count(headers: Mapping[str, Any], redelivered: bool, quorum: bool) -> int | None:
    """Deliveries so far including this one. Quorum queues add x-delivery-count
    (returns so far) from the first redelivery on; classic queues tell nothing."""
    raw = headers.get("x-delivery-count")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw + 1
    if quorum and not redelivered:
        return 1
    return None


def inbound(*, tag: int, generation: int, body: bytes, source: str, props: Any, routing_key: str | None,
            redelivered: bool, quorum: bool) -> InboundMessage:
    """Build an InboundMessage from pika's properties."""
    headers = dict(props.headers) if props.headers else {}
    for key, value in headers.items():
        if isinstance(value, int) and type(value) not in (int, bool):
            headers[key] = int(value)  # pika decodes 64-bit ints as its own ``long`` subclass
    ts = props.timestamp
    return InboundMessage(
        wire_tag=tag, generation=generation, body=body, source=source, headers=headers,
        routing_key=routing_key, message_id=props.message_id, correlation_id=props.correlation_id,
        reply_to=props.reply_to, content_type=props.content_type,
        timestamp=float(ts) if ts is not None else None, redelivered=redelivered,
        delivery_count=delivery_count(headers, redelivered, quorum),
    )
