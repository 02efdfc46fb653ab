"""paho and broker failures -> ackbridge's error tree (at the plugin edge).

TLS failures are worded by the core's one describer
(:func:`ackbridge.transport.tls.describe_tls_error`), as on every other broker.
"""

from __future__ import annotations

from ackbridge.errors import AckbridgeError, AuthenticationError, BrokerError, BrokerUnreachableError
from ackbridge.transport.tls import TLSVerificationError, describe_tls_error
from ackbridge.urls import BrokerURL

__all__ = ["TLSVerificationError", "connect_error", "lost_before_connack", "refused_connect",
           "subscription_refused"]

#: CONNACK reasons that mean the login was refused (paho gives 3.1.1's codes 4/5 as these).
_LOGIN_REFUSED = {0x86, 0x87, 0x8C}


def connect_error(exc: OSError, url: BrokerURL) -> AckbridgeError:
    """The ackbridge error for an exception of paho's first ``connect()``."""
    tls = describe_tls_error(exc, url)
    if tls is not None:
        return tls
    return BrokerUnreachableError(f"{url.redacted}: cannot connect ({exc.strerror or exc})")


def refused_connect(url: BrokerURL, code: int | None, reason: str) -> AckbridgeError:
    """The ackbridge error for a CONNACK that refused the connection."""
    if code in _LOGIN_REFUSED:
        return AuthenticationError(f"{url.redacted}: the broker refused the login of user "
                                   f"{url.username!r} ({reason})")
    return BrokerError(f"{url.redacted}: broker refused the connection: {reason}")


def lost_before_connack(tls: bool) -> str:
    """Why a connect failed when the broker closed the connection before its CONNACK.
    A TLS 1.3 broker refuses a missing client certificate so."""
    hint = " (does the broker require a client certificate? see tls_cert_file)" if tls else ""
    return f"the broker closed the connection before CONNACK{hint}"


def subscription_refused(url: BrokerURL, reasons: str) -> BrokerError:
    """The error for a SUBACK that refused a subscription (*reasons*: its reason codes)."""
    return BrokerError(f"{url.redacted}: subscription refused: {reasons}")
