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


class _ClosingSSLSocket(ssl.SSLSocket):
    """An SSLSocket that closes itself when its handshake fails.

    paho-mqtt (2.2.0, ``Client._ssl_wrap_socket``) wraps the TCP socket and calls
    ``do_handshake()`` without closing the wrapper when that raises (a certificate
    that does not verify, a broker that hangs up): the socket then lives on in
    the exception's frames and is closed by the garbage collector with a
    ResourceWarning. Closing it here releases it when the connect fails.
    """

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except BaseException:
            self.close()
            raise


def configure_tls(client: paho.Client, settings: ConnectionSettings, url: BrokerURL) -> None:
    """Set up *client* for TLS as the shared options say.

    The context is the one paho's ``tls_set`` would build (PROTOCOL_TLS_CLIENT, the
    CA file or the system's, the client certificate), made here only so that its
    sockets close themselves on a failed handshake (:class:`_ClosingSSLSocket`)."""
    if not settings.tls_verify:
        log.warning("%s: tls_verify=false: the broker certificate is NOT checked", url.redacted)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.sslsocket_class = _ClosingSSLSocket
    try:
        if settings.tls_cert_file is not None:
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        if not settings.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if settings.tls_ca_file is not None:
            context.load_verify_locations(settings.tls_ca_file)
        else:
            context.load_default_certs()
    except (OSError, ssl.SSLError) as exc:
        # Which file failed is not said by ssl; name every option that was given.
        given = [name for name in ("tls_ca_file", "tls_cert_file", "tls_key_file") if getattr(settings, name)]
        raise InvalidOptionError(f"{' / '.join(given) or 'TLS'} could not be loaded: {exc}") from None
    client.tls_set_context(context)
    client.tls_insecure_set(not settings.tls_verify)
