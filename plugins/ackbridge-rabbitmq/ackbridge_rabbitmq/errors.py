"""Driver errors (pika) mapped to ackbridge's tree at the plugin edge.

Channel-level closes (a broker reply code such as 404 or 406) become
BrokerError with that code; anything that ends the connection becomes
ConnectionLostError. A refused login is AuthenticationError, an unknown vhost
or a missing permission AccessDeniedError (neither recoverable), a TLS
failure the core's TLSVerificationError (as on the aio-pika transport), a
socket that nothing answers BrokerUnreachableError. Messages pass through
``redact`` so no password leaks.
"""

from __future__ import annotations

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


def _text(exc: BaseException) -> str:
    return redact(str(exc) or type(exc).__name__)


def reply_code(exc: BaseException) -> int | None:
    """The AMQP reply code carried by a pika close, if any."""
    code = getattr(exc, "reply_code", None)
    if isinstance(code, int):
        return code
    frame = getattr(exc, "frame", None)
    code = getattr(frame, "reply_code", None)
    if isinstance(code, int):
        return code
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def _root(exc: BaseException) -> BaseException:
    """pika wraps connect failures (workflow -> connector -> e.g. SSL error): dig to the cause."""
    for _ in range(5):
        inner = getattr(exc, "exceptions", None)
        if isinstance(inner, (list, tuple)) and inner:
            exc = inner[-1]
            continue
        nested = getattr(exc, "exception", None)
        if isinstance(nested, BaseException):
            exc = nested
            continue
        # pika.AMQPConnectionError carries the workflow failure as its first argument.
        args = getattr(exc, "args", ())
        if type(exc).__name__ == "AMQPConnectionError" and args and isinstance(args[0], BaseException):
            exc = args[0]
            continue
        break
    return exc


def describe(exc: BaseException | None) -> str:
    """A short, password-free account of why a channel or connection closed."""
    if exc is None:
        return "closed"
    exc = _root(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    code = reply_code(exc)
    text = getattr(exc, "reply_text", None)
    if code is not None and text:
        return f"{type(exc).__name__}: {code} {redact(str(text))}"
    return f"{type(exc).__name__}: {_text(exc)}"


def channel_error(exc: BaseException, doing: str) -> AckbridgeError:
    """Map the reason a channel closed while *doing* something."""
    import pika.exceptions as pe

    if isinstance(exc, AckbridgeError):
        return exc
    if isinstance(exc, pe.ChannelClosedByBroker):
        return BrokerError(f"{doing}: the broker closed the channel: {redact(exc.reply_text)}", exc.reply_code)
    if isinstance(exc, (pe.AMQPConnectionError, pe.ConnectionWrongStateError, ConnectionError, OSError)):
        return ConnectionLostError(f"{doing}: connection lost ({describe(exc)})")
    if isinstance(exc, pe.AMQPChannelError):
        return ConnectionLostError(f"{doing}: channel unusable ({describe(exc)})")
    return BrokerError(f"{doing}: {describe(exc)}")


def connect_error(exc: BaseException, url: BrokerURL) -> AckbridgeError:
    """Map why opening the connection to *url* failed."""
    import pika.exceptions as pe

    where = url.redacted
    # pika wraps the handshake's ssl error (workflow -> connector -> SSLCertVerificationError);
    # an ssl.SSLError is an OSError too, so it must be told apart before "unreachable".
    tls = describe_tls_error(_root(exc), url) or describe_tls_error(exc, url)
    if tls is not None:
        return tls
    if isinstance(exc, pe.ProbableAuthenticationError) or reply_code(_root(exc)) == 403:
        return AuthenticationError(f"{where}: the broker refused the login of user {url.username or 'guest'!r} "
                                   f"(wrong username or password)")
    if isinstance(exc, pe.ProbableAccessDeniedError) or reply_code(_root(exc)) == 530:
        text = getattr(_root(exc), "reply_text", None) or describe(exc)
        return AccessDeniedError(f"{where}: access denied ({redact(str(text))}): check the vhost and the "
                                 f"user's permissions")
    root = _root(exc)
    if isinstance(root, OSError):
        return BrokerUnreachableError(f"cannot connect to {where}: {root.strerror or type(root).__name__}")
    return ConnectionLostError(f"could not connect to {where}: {describe(exc)}")
