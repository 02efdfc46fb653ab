"""The plugin's own options and the resolved settings the transport reads.

The shared connection options (``connect_timeout``, ``heartbeat``,
``reconnect``, ``reconnect_max_delay``, ``tls_*``) come from
:mod:`ackbridge.options`; only what is JetStream's alone is declared here.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.errors import InvalidURLError
from ackbridge.options import ConnectionSettings, OptionSpec, non_negative_float, positive_int
from ackbridge.transport.tls import tls_context
from ackbridge.urls import BrokerURL
from ackbridge_nats.naming import DEFAULT_DEAD_LETTER_SUBJECT, DEFAULT_DURABLE, check_durable

TLS_SCHEMES = ("nats+tls",)
DEFAULT_PORT = 4222

OPTIONS = (
    OptionSpec("durable", str, DEFAULT_DURABLE, "durable pull consumer every ackbridge consumer of a queue shares",
               check_durable, "must be letters, digits, '_' or '-'"),
    OptionSpec("ack_wait", float, 30.0, "seconds JetStream waits for a settlement before it redelivers",
               lambda v: v >= 1, "must be >= 1"),
    positive_int("max_deliver", None, "server-side cap on deliveries of one message (JetStream then stops "
                 "delivering it without dead-lettering it; ackbridge's max_deliveries does dead-letter)",
                 nullable=True),
    OptionSpec("dead_letter_subject", str, DEFAULT_DEAD_LETTER_SUBJECT,
               "where reject() republishes; '{queue}' is replaced by the queue's subject",
               lambda v: bool(v) and "*" not in v and ">" not in v, "must be a subject without wildcards"),
    non_negative_float("requeue_delay", 0.0, "seconds before a requeued (-NAKed) message is redelivered"),
    OptionSpec("storage", str, "file", "stream storage for declare_queue: 'file' or 'memory'",
               lambda v: v in ("file", "memory"), "must be 'file' or 'memory'"),
    OptionSpec("duplicate_window", float, 120.0, "seconds a stream remembers Nats-Msg-Id for de-duplication",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("double_ack", bool, False, "wait for the server to confirm each ack (ack_sync): slower, but an "
               "ack lost on the way is reported instead of redelivered later"),
    positive_int("max_ack_pending", None, "the durable consumer's max_ack_pending (deliveries handed out and "
                 "not settled, over every consumer of the durable); unset: each subscribe's prefetch",
                 nullable=True),
    OptionSpec("pull_expires", float, 1.0, "seconds a pull request waits on the server before it is renewed (a closed "
               "consumer releases its deliveries when its requests end)",
               lambda v: v >= 0.5, "must be >= 0.5"),
)


@dataclass(frozen=True)
class NatsSettings:
    """Everything the transport needs, resolved and typed."""

    servers: str
    user: str | None
    password: str | None
    token: str | None
    tls: ssl.SSLContext | None
    tls_hostname: str | None
    durable: str
    ack_wait: float
    max_deliver: int | None
    dead_letter_template: str
    requeue_delay: float
    storage: str
    duplicate_window: float
    double_ack: bool
    pull_expires: float
    max_ack_pending: int | None
    connection: ConnectionSettings

    @classmethod
    def resolve(cls, url: BrokerURL, options: Mapping[str, Any], connection: ConnectionSettings) -> NatsSettings:
        if url.path not in ("", "/"):
            raise InvalidURLError(f"{url.redacted!r}: a NATS URL has no path (subjects are given to consume/publish)")
        tls = url.scheme in TLS_SCHEMES
        host = url.host or "localhost"
        shown_host = f"[{host}]" if ":" in host else host
        # nats-py reads credentials from the server URL too: keep them out of it.
        servers = f"{'tls' if tls else 'nats'}://{shown_host}:{url.port or DEFAULT_PORT}"
        password = url.password_text
        token = url.username if url.username and password is None else None
        return cls(
            servers=servers,
            user=url.username if password is not None else None,
            password=password,
            token=token,
            tls=tls_context(connection, url) if tls else None,
            tls_hostname=host if tls else None,
            durable=str(options.get("durable", DEFAULT_DURABLE)),
            ack_wait=float(options.get("ack_wait", 30.0)),
            max_deliver=options.get("max_deliver"),
            dead_letter_template=str(options.get("dead_letter_subject") or DEFAULT_DEAD_LETTER_SUBJECT),
            requeue_delay=float(options.get("requeue_delay", 0.0)),
            storage=str(options.get("storage", "file")),
            duplicate_window=float(options.get("duplicate_window", 120.0)),
            double_ack=bool(options.get("double_ack", False)),
            pull_expires=float(options.get("pull_expires", 1.0)),
            max_ack_pending=options.get("max_ack_pending"),
            connection=connection,
        )
