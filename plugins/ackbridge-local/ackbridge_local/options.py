"""The embedded broker's own options (the shared connection options come from
:mod:`ackbridge.options`) and their parsed values. Each default is stated once,
in its :class:`~ackbridge.options.OptionSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.options import OptionSpec, positive_int
from ackbridge.transport.files import parse_mode


def _valid_mode(text: str) -> bool:
    try:
        parse_mode(text)
    except ValueError:
        return False
    return True


OPTIONS = (
    OptionSpec("lease_timeout", float, 30.0, "seconds without heartbeat before leases return",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("fsync", bool, True, "fsync each group commit before confirming"),
    positive_int("max_message_bytes", 16 * 1024 * 1024, "larger publishes are refused"),
    OptionSpec("poll_ms", float, 20.0, "longest idle wait between polls", lambda v: v > 0, "must be > 0"),
    OptionSpec("file_mode", str, "0600", "permissions of the broker files it creates (directories get x where r)",
               _valid_mode, "an octal mode the owner can read and write, e.g. 0600 or 0640"),
)

_DEFAULTS = {spec.name: spec.default for spec in OPTIONS}


@dataclass(frozen=True)
class LocalSettings:
    lease_timeout: float
    fsync: bool
    max_message_bytes: int
    #: poll_ms in seconds.
    poll_s: float
    file_mode: int

    @classmethod
    def resolve(cls, options: Mapping[str, Any]) -> LocalSettings:
        """From resolved options (the core's) or a partial mapping (a direct caller): a missing
        option takes its spec's default."""

        def get(name: str) -> Any:
            return options.get(name, _DEFAULTS[name])

        return cls(lease_timeout=float(get("lease_timeout")), fsync=bool(get("fsync")),
                   max_message_bytes=int(get("max_message_bytes")), poll_s=float(get("poll_ms")) / 1000.0,
                   file_mode=parse_mode(str(get("file_mode"))))
