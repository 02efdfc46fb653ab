"""Typed option specifications, shared by the core and every adapter.

Options arrive as keyword arguments or as URL query parameters (strings);
:func:`resolve_options` checks names, coerces strings and validates values,
raising :class:`~ackbridge.errors.InvalidOptionError` with a "did you mean".
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.errors import InvalidOptionError

_TRUE = {"1", "true", "yes", "on"}
#: The words an option (or a switch in the environment) reads as false.
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
_FALSE = FALSE_WORDS


@dataclass(frozen=True)
class OptionSpec:
    name: str
    kind: type
    default: Any
    help: str
    check: Callable[[Any], bool] | None = None
    check_text: str = ""
    nullable: bool = False
    secret: bool = False

    def coerce(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        if isinstance(value, str) and self.kind is not str:
            value = self._from_text(value)
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.kind is not bool and isinstance(value, bool):
            raise InvalidOptionError(f"option {self.name!r} must be {self.kind.__name__}, not bool")
        if not isinstance(value, self.kind):
            raise InvalidOptionError(
                f"option {self.name!r} must be {self.kind.__name__}, not {type(value).__name__}"
            )
        if self.check is not None and not self.check(value):
            shown = "***" if self.secret else repr(value)
            raise InvalidOptionError(f"option {self.name!r}={shown} is invalid: {self.check_text}")
        return value

    def _from_text(self, text: str) -> Any:
        if self.nullable and text.lower() in {"", "none", "null"}:
            return None
        try:
            if self.kind is bool:
                low = text.lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError(text)
            return self.kind(text)
        except ValueError:
            shown = "***" if self.secret else repr(text)
            raise InvalidOptionError(
                f"option {self.name!r}={shown} is not a valid {self.kind.__name__}"
            ) from None


def positive_int(name: str, default: int | None, help: str, *, nullable: bool = False) -> OptionSpec:
    return OptionSpec(name, int, default, help, lambda v: v >= 1, "must be >= 1", nullable)


def non_negative_float(name: str, default: float, help: str) -> OptionSpec:
    return OptionSpec(name, float, default, help, lambda v: v >= 0, "must be >= 0")


CORE_OPTIONS: tuple[OptionSpec, ...] = (
    positive_int("prefetch", 100, "unsettled deliveries the broker may hand one consumer"),
    positive_int("conflate_count", 1, "flush wire acks after this many deliveries are acked"),
    non_negative_float("conflate_ms", 0.0, "flush wire acks at least this often (0: no timer)"),
    positive_int("window", 1000, "unconfirmed publishes before publish() waits"),
    OptionSpec(
        "confirm_timeout", float, 30.0, "seconds before a pending confirm is reported unknown",
        lambda v: v > 0, "must be > 0",
    ),
    positive_int("max_deliveries", None, "dead-letter a message delivered more often", nullable=True),
)


#: Connection options every plugin accepts, spelled once. A plugin reads the
#: resolved, typed values from its options mapping (or :class:`ConnectionSettings`)
#: and ignores those its protocol has no use for (TLS on a plain scheme).
CONNECTION_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("connect_timeout", float, 10.0, "seconds to wait for the connection (and a subscribe) to open",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("heartbeat", float, 30.0, "seconds between heartbeats / keepalives (0 disables where allowed)",
               lambda v: v >= 0, "must be >= 0"),
    OptionSpec("reconnect", bool, True, "reopen the connection with back-off and re-subscribe after a loss"),
    OptionSpec("reconnect_max_delay", float, 10.0, "longest back-off between reconnect attempts (s)",
               lambda v: v >= 0.1, "must be >= 0.1"),
    OptionSpec("tls_verify", bool, True, "TLS schemes: verify the broker's certificate and host name"),
    OptionSpec("tls_ca_file", str, None, "TLS schemes: PEM file of CA certificates to trust (default: system CAs)",
               nullable=True),
    OptionSpec("tls_cert_file", str, None, "TLS schemes: client certificate (PEM)", nullable=True),
    OptionSpec("tls_key_file", str, None, "TLS schemes: client private key (PEM)", nullable=True),
)

#: Spellings some plugins used before the vocabulary was shared: a "did you mean".
RENAMED_OPTIONS: Mapping[str, str] = {
    "ca_file": "tls_ca_file",
    "verify": "tls_verify",
    "cert_file": "tls_cert_file",
    "key_file": "tls_key_file",
    "keepalive": "heartbeat",
    "timeout": "connect_timeout",
}


@dataclass(frozen=True)
class ConnectionSettings:
    """The shared connection options, resolved and typed, as a plugin reads them."""

    connect_timeout: float
    heartbeat: float
    reconnect: bool
    reconnect_max_delay: float
    tls_verify: bool
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ConnectionSettings:
        """Read them from a transport's resolved options (defaults where absent)."""
        values = {spec.name: options.get(spec.name, spec.default) for spec in CONNECTION_OPTIONS}
        return cls(**values)


def resolve_options(
    specs: Iterable[OptionSpec],
    given: Mapping[str, Any],
    *,
    owner: str,
) -> dict[str, Any]:
    """Return every option with its default filled in, or raise InvalidOptionError."""
    by_name = {spec.name: spec for spec in specs}
    resolved = {name: spec.default for name, spec in by_name.items()}
    for name, value in given.items():
        spec = by_name.get(name)
        if spec is None:
            renamed = RENAMED_OPTIONS.get(name)
            close = [renamed] if renamed in by_name else difflib.get_close_matches(name, by_name, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(by_name))
            raise InvalidOptionError(f"{owner} has no option {name!r}{hint} (known: {known})")
        resolved[name] = spec.coerce(value)
    return resolved
