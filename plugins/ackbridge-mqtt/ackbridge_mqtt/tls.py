"""TLS for ``mqtts://`` and the errors a first connect maps to.

The shared options (``tls_verify``, ``tls_ca_file``, ``tls_cert_file``,
``tls_key_file``) go to paho's ``tls_set``: client certificates are its
``certfile``/``keyfile``. They are ignored on a plain ``mqtt://`` URL.
"""

from __future__ import annotations

import logging
import ssl

import paho.mqtt.client as paho

from ackbridge.errors import (
    AckbridgeError,
    AuthenticationError,
    BrokerError,
    BrokerUnreachableError,
    InvalidOptionError,
)
from ackbridge.options import ConnectionSettings
from ackbridge.transport.tls import TLSVerificationError
from ackbridge.urls import BrokerURL

# TLSVerificationError is re-exported: ackbridge_mqtt.transport exposes it to the plugin's users.
__all__ = ["TLSVerificationError", "configure_tls", "connect_error", "refused_connect"]

log = logging.getLogger("ackbridge.mqtt")


def configure_tls(client: paho.Client, settings: ConnectionSettings, url: BrokerURL) -> None:
    """Set up *client* for TLS as the shared options say."""
    if not settings.tls_verify:
        log.warning("%s: tls_verify=false: the broker certificate is NOT checked", url.redacted)
    try:
        client.tls_set(ca_certs=settings.tls_ca_file, certfile=settings.tls_cert_file,
                       keyfile=settings.tls_key_file,
                       cert_reqs=ssl.CERT_REQUIRED if settings.tls_verify else ssl.CERT_NONE)
    except (OSError, ssl.SSLError) as exc:
        # Which file failed is not said by ssl; name every option that was given.
        given = [name for name in ("tls_ca_file", "tls_cert_file", "tls_key_file") if getattr(settings, name)]
        raise InvalidOptionError(f"{' / '.join(given) or 'TLS'} could not be loaded: {exc}") from None
    if not settings.tls_verify:
        client.tls_insecure_set(True)


def connect_error(exc: OSError, url: BrokerURL) -> AckbridgeError:
    """The ackbridge error for an exception of paho's first ``connect()``."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TLSVerificationError(
            f"{url.redacted}: TLS certificate verification failed ({exc.verify_message}); set tls_ca_file "
            "to the CA that signed the broker's certificate (tls_verify=false turns checking off: unsafe)"
        )
    if isinstance(exc, ssl.SSLError):
        return TLSVerificationError(f"{url.redacted}: TLS handshake failed ({exc.reason})")
    return BrokerUnreachableError(f"{url.redacted}: cannot connect ({exc.strerror or exc})")


#: CONNACK reasons that mean the login was refused (paho gives 3.1.1's codes 4/5 as these).
_LOGIN_REFUSED = {0x86, 0x87, 0x8C}


def refused_connect(url: BrokerURL, code: int | None, reason: str) -> AckbridgeError:
    """The ackbridge error for a CONNACK that refused the connection."""
    if code in _LOGIN_REFUSED:
        return AuthenticationError(f"{url.redacted}: the broker refused the login of user "
                                   f"{url.username!r} ({reason})")
    return BrokerError(f"{url.redacted}: broker refused the connection: {reason}")
