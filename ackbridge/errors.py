"""The one exception tree of ackbridge.

Every error raised by ackbridge (core or plugin) derives from
:class:`AckbridgeError`. Messages never contain a password: URLs are always
rendered through :func:`ackbridge.urls.redact`.

::

    AckbridgeError
    ├── ConfigurationError            fatal: the caller's input is wrong
    │   ├── InvalidURLError           malformed broker URL
    │   ├── UnknownSchemeError        no plugin registered for the scheme
    │   ├── InvalidOptionError        unknown or ill-typed option
    │   ├── InvalidLabelError         bad or reserved acknowledgement label
    │   ├── AuthenticationError       the broker refused the credentials
    │   └── AccessDeniedError         unknown vhost, or no permission
    ├── PluginError                   a plugin failed to load or register
    ├── UnsupportedVerbError          the broker cannot do this verb
    ├── SettlementError               a settle call was refused, nothing sent
    │   ├── AlreadySettledError       the delivery was settled before
    │   └── StaleDeliveryError        recoverable: its connection is gone,
    │       │                         the broker will redeliver it
    │       └── ConsumerClosedError   its consumer was closed first; the
    │                                 broker will redeliver it
    ├── ConnectionLostError           recoverable: reconnect and retry
    │   └── BrokerUnreachableError    recoverable: nothing answers at host:port
    ├── BrokerError                   the broker closed a channel/link (code)
    │   └── SubscriptionCancelledError  the broker ended a consumer's subscription
    │                                 (its queue was deleted); not recoverable
    ├── DataLossError                 a gap in a producer's sequence (on_gap="raise")
    ├── HandlerTimeoutError           a handler ran past the pipeline's timeout
    └── MissingMessageIdError         the inbox cannot name a delivery: no message
                                      id, and its broker gives no stable one

``recoverable`` is True on the errors after which retrying (on a new
connection) can succeed; every other error means a bug or bad input.
A retry loop retries only ``recoverable`` errors: a wrong password
(:class:`AuthenticationError`) or an unknown vhost (:class:`AccessDeniedError`)
is never recoverable, on any plugin, sync or async.

Publishing during an outage (one rule on every plugin, both faces):
``publish()`` does not raise; nothing is sent and the confirm resolves at
once as ``unknown`` with a reason saying it was not sent. A publisher made
with ``retransmit=True`` sends it again once the connection is back, and its
confirm resolves once, with the final outcome and the number of attempts.
"""

from __future__ import annotations


class AckbridgeError(Exception):
    """Root of every ackbridge error."""

    recoverable: bool = False


class ConfigurationError(AckbridgeError):
    """The caller passed something ackbridge cannot use."""


class InvalidURLError(ConfigurationError):
    """A broker URL could not be parsed or is missing a required part."""


class UnknownSchemeError(ConfigurationError):
    """No registered plugin serves the URL's scheme."""


class InvalidOptionError(ConfigurationError):
    """An option is unknown to the adapter or has the wrong type or value."""


class InvalidLabelError(ConfigurationError):
    """An acknowledgement label is malformed or reserved."""


class AuthenticationError(ConfigurationError):
    """The broker refused the username or password (never recoverable)."""


class AccessDeniedError(ConfigurationError):
    """The credentials were accepted but the vhost does not exist or the user
    lacks a permission (never recoverable)."""


class PluginError(AckbridgeError):
    """A plugin could not be loaded or registered itself wrongly."""


class UnsupportedVerbError(AckbridgeError):
    """The broker behind this adapter cannot perform the requested verb."""

    def __init__(self, broker: str, verb: str, detail: str = "") -> None:
        self.broker = broker
        self.verb = verb
        message = f"{broker} does not support '{verb}'"
        super().__init__(f"{message}: {detail}" if detail else message)


class SettlementError(AckbridgeError):
    """A settlement was refused by the core; nothing was sent to the broker."""


class AlreadySettledError(SettlementError):
    """The delivery has already been settled once."""


class StaleDeliveryError(SettlementError):
    """The delivery came from an earlier connection generation.

    Its wire tag may now name a different message, so nothing is sent;
    the broker will redeliver the original message.
    """

    recoverable = True


class ConsumerClosedError(StaleDeliveryError):
    """The delivery's consumer was closed before it was settled.

    Closing cancels the subscription, so the broker takes the delivery back and
    redelivers it; nothing is sent.
    """


class ConnectionLostError(AckbridgeError):
    """The connection to the broker was lost."""

    recoverable = True


class BrokerUnreachableError(ConnectionLostError):
    """Nothing answered at the broker's address (refused, unresolvable, no route)."""


class BrokerError(AckbridgeError):
    """The broker closed a channel, link or connection with an error code."""

    def __init__(self, message: str, code: int | None = None) -> None:
        self.code = code
        super().__init__(f"{message} (code {code})" if code is not None else message)


class SubscriptionCancelledError(BrokerError):
    """The broker ended a consumer's subscription on its own, e.g. because its queue
    was deleted (RabbitMQ's ``basic.cancel``).

    The rule: deliveries handed out before the cancel stay settle-able (their
    connection generation is still live); those already received are handed out
    first, then every ``get()`` or iteration of that consumer raises this error,
    naming the source. Reconnecting does not help (the queue is gone): declare the
    queue and consume again. Other consumers on the connection go on.
    """

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        super().__init__(f"the broker cancelled the subscription to {source!r}: {detail}")


class DataLossError(AckbridgeError):
    """A consumer saw a gap in a producer's sequence numbers: messages the
    producer sent were never delivered (raised when ``on_gap="raise"``)."""

    def __init__(self, message: str, producer: str, missing: tuple[int, ...]) -> None:
        self.producer = producer
        self.missing = missing
        super().__init__(message)


class HandlerTimeoutError(AckbridgeError):
    """A handler run under :mod:`ackbridge.pipeline` took longer than its ``timeout``:
    the run counts as failed and goes through the redelivery policy."""


class MissingMessageIdError(AckbridgeError):
    """A delivery reached a transactional inbox without a message id, and its broker
    gives no stable id of its own (``docs/transactional.md`` lists which do): the
    inbox could not tell a copy of it from a new message, so it refuses it."""

    def __init__(self, source: str, broker: str) -> None:
        self.source = source
        self.broker = broker
        super().__init__(f"a delivery from {source!r} ({broker}) has no message id and {broker} gives no stable "
                         "id for it: the inbox cannot de-duplicate it; publish with message_id=")
