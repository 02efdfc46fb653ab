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
    shown = redact(url)
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
