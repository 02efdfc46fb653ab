"""TLS for ``mqtts://``: the shared ``tls_*`` options -> paho's ``tls_set``.

The shared options (``tls_verify``, ``tls_ca_file``, ``tls_cert_file``,
``tls_key_file``) go to paho's ``tls_set``: client certificates are its
``certfile``/``keyfile``. They are ignored on a plain ``mqtt://`` URL. A failed
handshake is worded by the core's describer (see :mod:`ackbridge_mqtt.errors`).
"""

from __future__ import annotations

import logging
import ssl

import paho.mqtt.client as paho

from ackbridge.errors import InvalidOptionError
from ackbridge.options import ConnectionSettings
from ackbridge.urls import BrokerURL

__all__ = ["configure_tls"]

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
