"""TLS from the shared ``tls_*`` options, for plugins whose client takes an
:class:`ssl.SSLContext` (nats-py, rstream, asyncio streams).

Verification is on unless ``tls_verify=false`` (warned about); the host name
checked is the URL's host.
"""

from __future__ import annotations

import logging
import ssl
import warnings

from ackbridge.errors import ConfigurationError, InvalidOptionError
from ackbridge.options import ConnectionSettings
from ackbridge.urls import BrokerURL

log = logging.getLogger("ackbridge")


class TLSVerificationError(ConfigurationError):
    """The server's TLS certificate could not be verified (not recoverable by retrying)."""


def tls_context(settings: ConnectionSettings, url: BrokerURL, *, warn_unverified: bool = False) -> ssl.SSLContext:
    """The client context for *url*: the CA file (else the system's), the client
    certificate when given, verification unless ``tls_verify=false``.

    ``tls_verify=false`` is logged as a warning; with *warn_unverified* it is a
    :class:`UserWarning` instead (for plugins that documented one)."""
    if settings.tls_key_file and not settings.tls_cert_file:
        raise InvalidOptionError("option 'tls_key_file' needs 'tls_cert_file' (the client certificate)")
    try:
        context = ssl.create_default_context(cafile=settings.tls_ca_file)
        if settings.tls_cert_file:
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        given = [name for name in ("tls_ca_file", "tls_cert_file", "tls_key_file") if getattr(settings, name)]
        raise InvalidOptionError(f"{' / '.join(given) or 'TLS'} could not be loaded: {exc}") from None
    if not settings.tls_verify:
        if warn_unverified:
            warnings.warn(f"{url.redacted}: tls_verify=false: the server certificate is NOT verified",
                          UserWarning, stacklevel=2)
        else:
            log.warning("%s: tls_verify=false: the server certificate is NOT checked", url.redacted)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def describe_tls_error(exc: BaseException, url: BrokerURL) -> ConfigurationError | None:
    """The configuration error for a TLS failure in *exc*'s chain, or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return TLSVerificationError(
                f"{url.redacted}: TLS certificate verification failed ({seen.verify_message}); set tls_ca_file "
                "to the CA that signed the server's certificate (tls_verify=false turns checking off: unsafe)")
        if isinstance(seen, ssl.SSLError):
            return TLSVerificationError(f"{url.redacted}: TLS handshake failed ({seen.reason})")
        seen = seen.__cause__ or seen.__context__
    return None
