"""The AMQP 1.0 adapter's own options, and what it decides from the peer's open.

The shared connection options (``connect_timeout``, ``heartbeat``,
``reconnect``, ``reconnect_max_delay``, ``tls_*``) are declared once in
:data:`ackbridge.options.CONNECTION_OPTIONS`; only the adapter's own are here.
"""

from __future__ import annotations

import itertools

from ackbridge.options import OptionSpec, positive_int

PEERS = ("rabbitmq", "generic")

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("peer", str, "rabbitmq", "capability table to declare: 'rabbitmq' (3.10 plugin gaps) or 'generic'",
               lambda v: v in PEERS, "must be 'rabbitmq' or 'generic'"),
    OptionSpec("inbox", str, "/queue/ackbridge.reply.{id}",
               "reply inbox address ({id} is filled in); 'dynamic' asks the broker for a dynamic node",
               lambda v: bool(v), "must not be empty"),
    OptionSpec("queue_address", str, "/queue/{name}", "address declare_queue() attaches to ({name} is filled in)",
               lambda v: "{name}" in v, "must contain {name}"),
    OptionSpec("hostname", str, None, "AMQP open hostname (RabbitMQ: 'vhost:NAME' picks a vhost)", nullable=True),
    OptionSpec("sasl_mechanisms", str, None, "space-separated SASL mechanisms to allow (default: PLAIN with a "
               "user, ANONYMOUS without)", nullable=True),
    positive_int("max_sender_links", 64, "idle sender links kept open (one per destination address)"),
)

# RabbitMQ < 3.10.11 ends the whole session on a 'modified' outcome.
_MODIFIED_SAFE_FROM = (3, 10, 11)


def _version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def modified_is_safe(product: str | None, version: str | None) -> bool:
    """Whether a 'modified' outcome can be sent without the peer ending the session."""
    if product is None or "rabbitmq" not in product.lower():
        return product is not None
    return version is not None and _version(version) >= _MODIFIED_SAFE_FROM


__all__ = ["OPTIONS", "PEERS", "modified_is_safe"]
