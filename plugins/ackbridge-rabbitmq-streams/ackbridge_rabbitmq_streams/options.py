"""The plugin's own options (the shared connection options come from :mod:`ackbridge.options`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.options import OptionSpec
from ackbridge_rabbitmq_streams.naming import name_ok


def _offset_ok(value: str) -> bool:
    return value in ("first", "last", "next") or (value.isdigit() and int(value) >= 0)


def _reference_ok(value: str) -> bool:
    return name_ok(value)


OPTIONS = (
    OptionSpec("offset", str, "first", "where a consumer without a stored offset starts: first, last (the last "
               "chunk), next (new messages only) or an absolute offset", _offset_ok,
               "must be 'first', 'last', 'next' or an offset >= 0"),
    OptionSpec("reference", str, "ackbridge", "consumer reference: the name its offset is stored under on the "
               "broker; a consumer resumes after the offset stored for it", _reference_ok,
               "must be 1..255 ASCII characters"),
    OptionSpec("publisher_name", str, None, "named publisher (broker-side de-duplication by publishing id); "
               "numbering goes on from the broker's last stored id after a restart", _reference_ok,
               "must be 1..255 ASCII characters", nullable=True),
)


@dataclass(frozen=True)
class StreamSettings:
    offset: str | int
    reference: str
    publisher_name: str | None

    @classmethod
    def resolve(cls, options: Mapping[str, Any]) -> StreamSettings:
        offset = str(options.get("offset", "first"))
        return cls(offset=int(offset) if offset.isdigit() else offset,
                   reference=str(options.get("reference", "ackbridge")),
                   publisher_name=options.get("publisher_name"))
