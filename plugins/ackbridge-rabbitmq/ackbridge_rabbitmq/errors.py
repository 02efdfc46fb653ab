"""Driver errors (pika, aiormq) mapped to ackbridge's tree at the plugin edge.

Channel-level closes (a broker reply code such as 404 or 406) become
BrokerError with that code; anything that ends the connection becomes
ConnectionLostError. Messages pass through ``redact`` so no password leaks.
"""

from __future__ import annotations

from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError
from ackbridge.urls import redact


def _text(exc: BaseException) -> str:
    return redact(str(exc) or type(exc).__name__)


def reply_code(exc: BaseException) -> int | None:
    """The AMQP reply code carried by a pika or aiormq close, if any."""
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
        break
    return exc


def describe(exc: BaseException | None) -> str:
    """A short, password-free account of why a channel or connection closed."""
    if exc is None:
        return "closed"
    exc = _root(exc)
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


def aiormq_error(exc: BaseException, doing: str) -> AckbridgeError:
    """The aiormq twin of :func:`channel_error`."""
    import aiormq.exceptions as ae

    if isinstance(exc, AckbridgeError):
        return exc
    if isinstance(exc, ae.ChannelClosed):
        # aiormq encodes the reply code in the exception class, not an attribute.
        codes = {ae.ChannelAccessRefused: 403, ae.ChannelNotFoundEntity: 404,
                 ae.ChannelLockedResource: 405, ae.ChannelPreconditionFailed: 406}
        code = next((c for cls, c in codes.items() if isinstance(exc, cls)), None) or reply_code(exc)
        text = getattr(exc, "message", None) or _text(exc)
        return BrokerError(f"{doing}: the broker closed the channel: {redact(str(text))}", code)
    if isinstance(exc, ae.ChannelInvalidStateError) or isinstance(exc, ae.ConnectionClosed) \
            or isinstance(exc, (ConnectionError, OSError, ae.AMQPConnectionError)):
        return ConnectionLostError(f"{doing}: connection lost ({describe(exc)})")
    if isinstance(exc, ae.AMQPError):
        return BrokerError(f"{doing}: {describe(exc)}", reply_code(exc))
    return BrokerError(f"{doing}: {describe(exc)}")
