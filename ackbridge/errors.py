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
    │   └── InvalidLabelError         bad or reserved acknowledgement label
    ├── PluginError                   a plugin failed to load or register
    ├── UnsupportedVerbError          the broker cannot do this verb
    ├── SettlementError               a settle call was refused, nothing sent
    │   ├── AlreadySettledError       the delivery was settled before
    │   └── StaleDeliveryError        recoverable: its connection is gone,
    │                                 the broker will redeliver it
    ├── ConnectionLostError           recoverable: reconnect and retry
    └── BrokerError                   the broker closed a channel/link (code)

``recoverable`` is True on the errors after which retrying (on a new
connection) can succeed; every other error means a bug or bad input.
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


class ConnectionLostError(AckbridgeError):
    """The connection to the broker was lost."""

    recoverable = True


class BrokerError(AckbridgeError):
    """The broker closed a channel, link or connection with an error code."""

    def __init__(self, message: str, code: int | None = None) -> None:
        self.code = code
        super().__init__(f"{message} (code {code})" if code is not None else message)
