"""aiormq's errors mapped to ackbridge's tree at the plugin edge (the aio-pika transport).

The same tree as the pika transport's ``errors.py``: a channel closed by the broker
is BrokerError with its reply code; anything that ends the connection is
ConnectionLostError; a refused login AuthenticationError, an unknown vhost or a
missing permission AccessDeniedError, nothing listening BrokerUnreachableError,
a TLS failure the core's TLSVerificationError. Texts pass through ``redact``.
"""

from __future__ import annotations

import aiormq.exceptions as ae

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

#: aiormq raises one class per channel reply code and keeps only the text: the codes back.
_CHANNEL_CODES: dict[type[BaseException], int] = {
    ae.ChannelAccessRefused: 403,
    ae.ChannelNotFoundEntity: 404,
    ae.ChannelLockedResource: 405,
    ae.ChannelPreconditionFailed: 406,
}


def reply_code(exc: BaseException) -> int | None:
    """The AMQP reply code of a channel or connection close, where aiormq kept it."""
    for kind, code in _CHANNEL_CODES.items():
        if isinstance(exc, kind):
            return code
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def reply_text(exc: BaseException) -> str:
    """The broker's words (reply_text), else aiormq's account; never a password."""
    args = [a for a in getattr(exc, "args", ()) if isinstance(a, str)]
    return redact(args[-1] if args else (str(exc) or type(exc).__name__))


def describe(exc: BaseException | None) -> str:
    """A short, password-free account of why a channel or connection closed."""
    if exc is None:
        return "closed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    code = reply_code(exc)
    return f"{type(exc).__name__}: {code} {reply_text(exc)}" if code is not None else \
        f"{type(exc).__name__}: {reply_text(exc)}"


def is_broker_channel_close(exc: BaseException | None) -> bool:
    """Whether *exc* is the broker closing one channel (the connection lives on)."""
    return isinstance(exc, ae.ChannelClosed) and reply_code(exc) is not None


def channel_error(exc: BaseException, doing: str) -> AckbridgeError:
    """Map why *doing* failed on a channel."""
    if isinstance(exc, AckbridgeError):
        return exc
    if isinstance(exc, ae.ChannelClosed) and reply_code(exc) is not None:
        return BrokerError(f"{doing}: the broker closed the channel: {reply_text(exc)}", reply_code(exc))
    if isinstance(exc, (ae.AMQPConnectionError, ae.ChannelInvalidStateError, ConnectionError, OSError)):
        return ConnectionLostError(f"{doing}: connection lost ({describe(exc)})")
    if isinstance(exc, ae.AMQPChannelError):
        return ConnectionLostError(f"{doing}: channel unusable ({describe(exc)})")
    return BrokerError(f"{doing}: {describe(exc)}")


def connect_error(exc: BaseException, url: BrokerURL) -> AckbridgeError:
    """Map why opening the connection to *url* failed."""
    where = url.redacted
    tls = describe_tls_error(exc, url)
    if tls is not None:
        return tls
    if isinstance(exc, (ae.ProbableAuthenticationError, ae.AuthenticationError)) or reply_code(exc) == 403:
        return AuthenticationError(f"{where}: the broker refused the login of user {url.username or 'guest'!r} "
                                   f"(wrong username or password)")
    if isinstance(exc, ae.ConnectionNotAllowed) or reply_code(exc) == 530:
        return AccessDeniedError(f"{where}: access denied ({reply_text(exc)}): check the vhost and the "
                                 f"user's permissions")
    if isinstance(exc, (OSError, ae.AMQPConnectionError)) and not isinstance(exc, ae.ConnectionClosed):
        errno_text = next((a for a in getattr(exc, "args", ())[1:] if isinstance(a, str)), None)
        return BrokerUnreachableError(f"cannot connect to {where}: {redact(errno_text or describe(exc))}")
    if isinstance(exc, TimeoutError):
        return BrokerUnreachableError(f"cannot connect to {where}: no answer within the connect_timeout")
    return ConnectionLostError(f"could not connect to {where}: {describe(exc)}")
