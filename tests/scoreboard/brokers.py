"""The scoreboard's broker list: a harness factory per broker, and how to reach it through the proxy."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ackbridge.testing import BrokerHarness


@dataclass(frozen=True)
class BrokerEntry:
    name: str
    make: Callable[[], BrokerHarness]
    #: proxied_url(harness) -> (proxy_port -> url), or None when the broker has no socket.
    proxied: Callable[[BrokerHarness], Callable[[int], str]] | None
    faults: tuple[str, ...]


def _local() -> BrokerHarness:
    from tests.local.harness import LocalHarness

    return LocalHarness(Path(tempfile.mkdtemp(prefix="scoreboard-")))


LOCAL_FAULTS = ("none", "connection-cut", "consumer-sigkill", "poison")

BROKERS: list[BrokerEntry] = [
    BrokerEntry("embedded", _local, None, LOCAL_FAULTS),
]
