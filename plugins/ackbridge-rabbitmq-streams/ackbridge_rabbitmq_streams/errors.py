"""rstream and stream-protocol errors -> the ackbridge error tree (at the plugin edge).

rstream raises :class:`rstream.exceptions.ServerError` subclasses named after
the protocol's response codes, socket errors and timeouts. None of them
carries the password (rstream never puts it in a message), but every message
built here names the broker by ``url.redacted`` only.
"""

from __future__ import annotations

import asyncio
import socket

from rstream import exceptions as rx
from rstream.connection import ConnectionClosed

from ackbridge.errors import (
    AccessDeniedError,
    AckbridgeError,
    AuthenticationError,
    BrokerError,
    BrokerUnreachableError,
    ConnectionLostError,
)
from ackbridge.transport.tls import describe_tls_error
from ackbridge.urls import BrokerURL, redact


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "closed"
    text = redact(str(exc).strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def code_of(exc: BaseException) -> int | None:
    code = getattr(type(exc), "code", None)
    return code if isinstance(code, int) else None


def stream_error(exc: BaseException, doing: str, url: BrokerURL) -> AckbridgeError:
    """*exc* as the ackbridge error a caller can act on."""
    if isinstance(exc, AckbridgeError):
        return exc
    tls = describe_tls_error(exc, url)
    if tls is not None:
        return tls
    if isinstance(exc, rx.AuthenticationFailure | rx.SASLAuthenticationFailureLoopback
                  | rx.SASLMechanismNotSupported | rx.SASLError):
        return AuthenticationError(f"{doing} on {url.redacted}: the broker refused the credentials "
                                   f"({type(exc).__name__})")
    if isinstance(exc, rx.VirtualHostAccessFailure | rx.AccessRefused):
        return AccessDeniedError(f"{doing} on {url.redacted}: access refused ({type(exc).__name__}): "
                                 "unknown virtual host or no permission")
    if isinstance(exc, rx.StreamDoesNotExist):
        return BrokerError(f"{doing} on {url.redacted}: the stream does not exist", rx.StreamDoesNotExist.code)
    if isinstance(exc, rx.ServerError):
        return BrokerError(f"{doing} on {url.redacted}: the broker answered {type(exc).__name__}", code_of(exc))
    if isinstance(exc, ConnectionRefusedError | socket.gaierror):
        return BrokerUnreachableError(f"{doing}: cannot connect to {url.redacted} ({describe(exc)})")
    if isinstance(exc, asyncio.TimeoutError | TimeoutError | ConnectionClosed | OSError | EOFError):
        return ConnectionLostError(f"{doing} on {url.redacted}: {describe(exc)}")
    return ConnectionLostError(f"{doing} on {url.redacted}: {describe(exc)}")
