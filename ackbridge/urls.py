"""Broker URLs: parsing, validation and redaction.

The password is kept in a :class:`Secret` whose ``repr`` and ``str`` hide it,
so a :class:`BrokerURL` can be logged, printed or put into an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from ackbridge.errors import InvalidURLError

_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
# user:password@ anywhere (with or without a well-formed scheme before it).
_USERINFO = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*:/+)?(?P<user>[^\s:/@'\"]*):(?P<pw>[^\s@'\"]*)@")


class Secret:
    """A string that never shows itself in repr, str or format."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


def redact(text: str) -> str:
    """Replace every ``scheme://user:password@`` password in *text* with ``***``."""
    return _USERINFO.sub(lambda m: f"{m['pre'] or ''}{m['user']}:***@", text)


def redact_url(url: str) -> str:
    """*url* with its password replaced by ``***``, whatever shape it has.

    Unlike :func:`redact` (for free text) it needs no well-formed URL: a password
    with spaces or ``@``, a forgotten host (``amqp://user:secret``) or a missing
    scheme are hidden too. Where it cannot tell, it hides more than needed.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        return f"{scheme}{sep}{user}{':***' if colon else ''}@{_hide_odd_port(rest[at + 1:])}"
    return f"{scheme}{sep}{_hide_odd_port(rest)}"


def _hide_odd_port(rest: str) -> str:
    """``host:port...`` as it is; ``user:secret`` (no host, or a port that is no
    number) with everything after the colon hidden."""
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            return rest
        host, after = rest[:close + 1], rest[close + 1:]
        if not after.startswith(":"):
            return rest
        after = after[1:]
    else:
        host, colon, after = rest.partition(":")
        if not colon:
            return rest
    port = re.match(r"\d*", after)
    tail = after[port.end():] if port else after
    if port and port.group() and (not tail or tail[0] in "/?#"):
        return rest
    return f"{host}:***"


@dataclass(frozen=True)
class BrokerURL:
    """A parsed broker URL. ``str()`` gives the redacted form."""

    scheme: str
    host: str | None
    port: int | None
    username: str | None
    password: Secret | None = field(repr=False)
    path: str
    query: tuple[tuple[str, str], ...]
    #: host[:port] and path exactly as written (case kept), without user info.
    location: str = ""

    @property
    def redacted(self) -> str:
        auth = ""
        if self.username is not None:
            auth = self.username + (":***" if self.password is not None else "") + "@"
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"  # IPv6
        if self.port is not None:
            host = f"{host}:{self.port}"
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return f"{self.scheme}://{auth}{host}{self.path}" + (f"?{query}" if query else "")

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        return f"BrokerURL({self.redacted!r})"

    @property
    def password_text(self) -> str | None:
        return self.password.reveal() if self.password is not None else None


def parse_url(url: str) -> BrokerURL:
    """Parse *url*; every error message shows the URL redacted."""
    if not isinstance(url, str):
        raise InvalidURLError(f"broker URL must be a string, not {type(url).__name__}")
    shown = redact_url(url)
    if "://" not in url:
        raise InvalidURLError(f"broker URL {shown!r} has no scheme (expected e.g. 'amqp://host')")
    scheme = url.split("://", 1)[0].lower()
    if not _SCHEME.match(scheme):
        raise InvalidURLError(f"broker URL {shown!r} has an invalid scheme {scheme!r}")
    try:
        parts: SplitResult = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        # urllib's message may quote the netloc (with the password): never reuse it.
        kind = "port" if "port" in str(exc).lower() else "address"
        raise InvalidURLError(f"broker URL {shown!r} has an invalid {kind}") from None
    if parts.netloc.endswith(":") and "@" not in parts.netloc:
        # e.g. amqp://user:/secret: a colon with no port and no '@' is a forgotten host
        # (or a password's '/' ending the host part), never a host with a default port.
        raise InvalidURLError(f"broker URL {shown!r} has ':' but no port after its host; if this is "
                              "'user:password', the host is missing")
    if "@" in parts.path + parts.query + parts.fragment:
        # e.g. amqp://user:pa/ss@host: the password's "/" ended the host part.
        raise InvalidURLError(f"broker URL {shown!r} has '@' after its host: percent-escape '/', '?', '#' and "
                              "'@' in a username or password")
    if any(ch in url for ch in "\r\n\t \x00"):
        raise InvalidURLError(f"broker URL {shown!r} contains whitespace or control characters")
    try:
        query = tuple(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)))
    except ValueError:
        raise InvalidURLError(f"broker URL {shown!r} has a malformed query string") from None
    password = Secret(unquote(parts.password)) if parts.password is not None else None
    return BrokerURL(
        scheme=scheme,
        host=parts.hostname,
        port=port,
        username=unquote(parts.username) if parts.username is not None else None,
        password=password,
        path=unquote(parts.path),
        query=query,
        location=unquote(parts.netloc.rpartition("@")[2] + parts.path),
    )
