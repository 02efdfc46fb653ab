"""TLS for ``amqp10s://``: the proton SSLDomain built from the shared ``tls_*`` options."""

from __future__ import annotations

from proton import SSL, SSLDomain

from ackbridge.errors import ConfigurationError
from ackbridge.options import ConnectionSettings


def ssl_domain(settings: ConnectionSettings) -> SSLDomain:
    """A client domain: the peer's certificate and host name verified unless
    ``tls_verify`` is false; ``tls_ca_file`` trusted; ``tls_cert_file``
    presented when given, with its key from ``tls_key_file`` (or from the
    certificate's own PEM file when no key file is given)."""
    if not SSL.present():
        raise ConfigurationError("amqp10s:// needs proton built with TLS support (SSL not present)")
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    ca = settings.tls_ca_file
    if ca:
        domain.set_trusted_ca_db(ca)
    if settings.tls_verify:
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, ca)
    else:
        domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    if settings.tls_cert_file:
        domain.set_credentials(settings.tls_cert_file, settings.tls_key_file or settings.tls_cert_file, None)
    return domain
