"""I/O-free pieces shared by the pika (sync) and aiormq (async) sides.

Capabilities, options, the destination syntax, queue arguments, TLS and the
mapping of message properties live here once, so both sides behave alike.
"""

from __future__ import annotations

import ssl
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.capabilities import Capabilities, Verb, emulated, native, unsupported
from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge.options import OptionSpec, positive_int
from ackbridge.urls import BrokerURL

_COMMON_VERBS = {
    Verb.ACK: native("basic.ack on the subscription's own channel"),
    Verb.REQUEUE: native("basic.nack requeue=true"),
    Verb.REJECT: native("basic.reject requeue=false; dead-lettered to QUEUE.dlq when declared with dead_letter"),
    Verb.CUMULATIVE_ACK: native("basic.ack multiple=true (one channel per subscription, so tags never mix)"),
    Verb.CONFIRM: native("publisher confirms streamed on a dedicated channel, multiple honoured"),
    Verb.CONFIRM_REFUSED: native("Basic.Nack, and Basic.Return of mandatory publishes (unroutable)"),
    Verb.LABELLED_ACKS: emulated("replies go to an exclusive per-connection reply queue, consumed with auto-ack"),
}

CLASSIC = Capabilities(
    broker="rabbitmq",
    verbs={
        **_COMMON_VERBS,
        Verb.DELIVERY_COUNT: unsupported(
            "classic queues only carry the redelivered flag; use queue_type=quorum for x-delivery-count"),
    },
    notes=("queue_type=classic",),
)

QUORUM = Capabilities(
    broker="rabbitmq",
    verbs={**_COMMON_VERBS, Verb.DELIVERY_COUNT: native("quorum queues' x-delivery-count header (+1)")},
    notes=("queue_type=quorum",),
)

QUEUE_TYPES = ("classic", "quorum")

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("queue_type", str, "classic", "type of queues declare_queue() creates (classic|quorum)",
               lambda v: v in QUEUE_TYPES, "must be 'classic' or 'quorum'"),
    OptionSpec("reconnect", bool, True, "reopen the connection with back-off and re-subscribe after a loss"),
    OptionSpec("reconnect_max_delay", float, 10.0, "longest back-off between reconnect attempts (s)",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("heartbeat", int, 60, "AMQP heartbeat interval in seconds (0 disables)",
               lambda v: v >= 0, "must be >= 0"),
    OptionSpec("connect_timeout", float, 10.0, "seconds to wait for the connection to open",
               lambda v: v > 0, "must be > 0"),
    positive_int("delivery_limit", None, "quorum queues: x-delivery-limit (broker-side poison limit)",
                 nullable=True),
    OptionSpec("tls_ca_file", str, None, "amqps: PEM file of CA certificates to trust (default: system CAs)",
               nullable=True),
    OptionSpec("tls_verify", bool, True, "amqps: verify the broker certificate and host name"),
)

#: Header the sync side never adds; documented here because aiormq and this
#: plugin both give every publish a message_id (needed to match Basic.Return).
GENERATED_ID_NOTE = "publishes without a message_id get a generated one"


def option(options: Mapping[str, Any], name: str) -> Any:
    for spec in OPTIONS:
        if spec.name == name:
            return options.get(name, spec.default)
    raise KeyError(name)


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
    """Verify certificates by default; an explicit tls_verify=false warns."""
    ca_file = option(options, "tls_ca_file")
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidOptionError(f"option 'tls_ca_file' could not be loaded: {exc}") from None
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


#: basic.qos prefetch_count is a 16-bit field.
MAX_PREFETCH = 65535


def check_prefetch(prefetch: int) -> int:
    """pika fails to encode a larger prefetch_count inside its I/O loop, which ends
    the connection (and every reconnect would ask again): refuse it here."""
    if prefetch > MAX_PREFETCH:
        raise InvalidOptionError(
            f"prefetch {prefetch} is above {MAX_PREFETCH}, the largest prefetch_count AMQP 0-9-1 can carry")
    return prefetch


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
    """Keyword arguments for pika.BasicProperties / aiormq Basic.Properties.

    Called before the publish is queued, so a header the wire cannot carry is an
    InvalidOptionError for this publish alone."""
    if message.headers:
        for key, value in message.headers.items():
            if isinstance(value, float):
                # pika's table encoder has no float: it raised inside the I/O loop,
                # after the confirm tracker had counted the publish, which shifted
                # every later confirm onto the wrong message. aiormq could send it;
                # both sides refuse it so they behave alike.
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
    """Build an InboundMessage from pika or aiormq properties (same attribute names)."""
    headers = dict(props.headers) if props.headers else {}
    for key, value in headers.items():
        if isinstance(value, int) and type(value) not in (int, bool):
            headers[key] = int(value)  # pika decodes 64-bit ints as its own ``long`` subclass
    ts = props.timestamp
    if ts is not None and not isinstance(ts, (int, float)):
        ts = ts.timestamp()  # aiormq decodes timestamps to datetime
    return InboundMessage(
        wire_tag=tag, generation=generation, body=body, source=source, headers=headers,
        routing_key=routing_key, message_id=props.message_id, correlation_id=props.correlation_id,
        reply_to=props.reply_to, content_type=props.content_type,
        timestamp=float(ts) if ts is not None else None, redelivered=redelivered,
        delivery_count=delivery_count(headers, redelivered, quorum),
    )
