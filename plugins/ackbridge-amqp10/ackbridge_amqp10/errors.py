"""proton conditions and failures -> ackbridge's error tree (at the plugin edge).

A peer's condition is read tolerantly first (:mod:`ackbridge_amqp10.peer_text`);
here it becomes text with every secret scrubbed, and an error of the right kind.
"""

from __future__ import annotations

from typing import Any

from ackbridge.errors import (
    AccessDeniedError,
    AckbridgeError,
    AuthenticationError,
    BrokerError,
    BrokerUnreachableError,
    ConnectionLostError,
)
from ackbridge.urls import BrokerURL, redact

#: Conditions that mean the login was refused.
AUTH_CONDITIONS = frozenset({"amqp:unauthorized-access", "amqp:sasl:auth-failed", "amqp:sasl:sys-perm"})


def scrub(text: str, url: BrokerURL) -> str:
    """*text* with credentials (in URLs, and the URL's password anywhere) replaced."""
    text = redact(text)
    secret = url.password_text
    if secret and len(secret) >= 3:
        text = text.replace(secret, "***")
    return text


def describe(condition: Any, url: BrokerURL) -> str:
    """A peer's condition as text, with any secret scrubbed."""
    if condition is None:
        return "no reason given"
    name = getattr(condition, "name", "") or ""
    description = getattr(condition, "description", "") or ""
    return scrub(f"{name}: {description}" if description else str(name), url)


def broker_error(what: str, text: str) -> BrokerError:
    """A refusal by the broker; *what* is the redacted URL."""
    return BrokerError(f"{what}: {text}")


def open_error(condition: Any, reason: str, url: BrokerURL) -> AckbridgeError:
    """The error for a connection that could not be opened (*reason*: the described condition)."""
    name = getattr(condition, "name", "") or ""
    if name in AUTH_CONDITIONS:
        return AuthenticationError(f"{url.redacted}: authentication failed for user {url.username!r} ({reason})")
    if name in ("amqp:not-found", "amqp:not-allowed") and "vhost" in reason.lower():
        return AccessDeniedError(f"{url.redacted}: access denied ({reason}): check the vhost and the "
                                 "user's permissions")
    if "refused" in reason.lower() or "resolve" in reason.lower() or "unreachable" in reason.lower():
        return BrokerUnreachableError(f"cannot connect to {url.redacted}: {reason}")
    return ConnectionLostError(f"cannot connect to {url.redacted}: {reason}")
