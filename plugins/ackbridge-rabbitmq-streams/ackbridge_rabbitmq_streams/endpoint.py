"""Where and how to connect: host, port, virtual host, credentials, TLS.

``rabbitmq-stream://user:pass@host:5552/vhost`` (the path is the virtual
host, URL-encoded; empty or ``/`` means ``/``), ``rabbitmq-stream+tls://``
on port 5551 by default. The password stays in a :class:`~ackbridge.urls.Secret`
until the moment it is handed to rstream.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from urllib.parse import unquote

from ackbridge.errors import InvalidURLError
from ackbridge.options import ConnectionSettings
from ackbridge.transport.tls import tls_context
from ackbridge.urls import BrokerURL, Secret
from ackbridge_rabbitmq_streams.naming import name_ok

SCHEME = "rabbitmq-stream"
TLS_SCHEME = "rabbitmq-stream+tls"
DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551


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
