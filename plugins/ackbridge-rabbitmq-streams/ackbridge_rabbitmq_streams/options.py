"""What a user configures, parsed: the URL (:class:`Endpoint`), the plugin's own
options (:data:`OPTIONS`, :class:`StreamSettings`) and the offset log's
(:data:`LOG_OPTIONS`). The shared connection options come from
:mod:`ackbridge.options`; each default is stated once, in its :class:`OptionSpec`.

``rabbitmq-stream://user:pass@host:5552/vhost`` (the path is the virtual
host, URL-encoded; empty or ``/`` means ``/``), ``rabbitmq-stream+tls://``
on port 5551 by default. The password stays in a :class:`~ackbridge.urls.Secret`
until the moment it is handed to rstream.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ackbridge.errors import InvalidURLError
from ackbridge.options import ConnectionSettings, OptionSpec
from ackbridge.transport.tls import tls_context
from ackbridge.urls import BrokerURL, Secret
from ackbridge_rabbitmq_streams.naming import name_ok

SCHEME = "rabbitmq-stream"
TLS_SCHEME = "rabbitmq-stream+tls"
DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551


def _offset_ok(value: str) -> bool:
    return value in ("first", "last", "next") or (value.isdigit() and int(value) >= 0)


def _reference_ok(value: str) -> bool:
    return name_ok(value)


OPTIONS = (
    OptionSpec("offset", str, "first", "where a consumer without a stored offset starts: first, last (the last "
               "chunk), next (new messages only) or an absolute offset", _offset_ok,
               "must be 'first', 'last', 'next' or an offset >= 0"),
    OptionSpec("reference", str, "ackbridge", "consumer reference: the name its offset is stored under on the "
               "broker; a consumer resumes after the offset stored for it", _reference_ok,
               "must be 1..255 ASCII characters"),
    OptionSpec("publisher_name", str, None, "named publisher (broker-side de-duplication by publishing id); "
               "numbering goes on from the broker's last stored id after a restart", _reference_ok,
               "must be 1..255 ASCII characters", nullable=True),
)

#: The offset log's options, beside the shared connection options.
LOG_OPTIONS = (
    OptionSpec("read_timeout", float, 30.0, "seconds read() waits for the next chunk of a range before it "
               "raises (a range past the last committed message waits for it)", lambda v: v > 0, "must be > 0"),
    OptionSpec("read_credit", int, 4, "chunks the broker may send ahead of the reader",
               lambda v: 1 <= v <= 1000, "must be 1..1000"),
)

_DEFAULTS = {spec.name: spec.default for spec in OPTIONS}


@dataclass(frozen=True)
class StreamSettings:
    offset: str | int
    reference: str
    publisher_name: str | None

    @classmethod
    def resolve(cls, options: Mapping[str, Any]) -> StreamSettings:
        """From resolved options; a missing one takes its spec's default."""

        def get(name: str) -> Any:
            return options.get(name, _DEFAULTS[name])

        offset = str(get("offset"))
        return cls(offset=int(offset) if offset.isdigit() else offset, reference=str(get("reference")),
                   publisher_name=get("publisher_name"))


@dataclass(frozen=True)
class Endpoint:
    """One broker address with what it takes to log in."""

    url: BrokerURL
    host: str
    port: int
    vhost: str
    username: str
    password: Secret = field(repr=False)
    tls: ssl.SSLContext | None = field(repr=False)
    connection: ConnectionSettings

    @classmethod
    def resolve(cls, url: BrokerURL, connection: ConnectionSettings) -> Endpoint:
        tls = url.scheme == TLS_SCHEME
        path = url.path or "/"
        vhost = "/" if path == "/" else unquote(path[1:])
        if "/" in vhost and vhost != "/":
            raise InvalidURLError(f"{url.redacted!r}: the path is one virtual host (encode '/' as %2F)")
        if not name_ok(vhost):
            raise InvalidURLError(f"{url.redacted!r}: the virtual host must be 1..255 ASCII characters "
                                  "(rstream 1.1 cannot carry others)")
        return cls(
            url=url,
            host=url.host or "localhost",
            port=url.port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT),
            vhost=vhost,
            username=url.username if url.username is not None else "guest",
            password=url.password if url.password is not None else Secret("guest"),
            tls=tls_context(connection, url) if tls else None,
            connection=connection,
        )

    @property
    def redacted(self) -> str:
        return self.url.redacted
