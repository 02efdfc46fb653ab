"""Broker-side view of the embedded broker: its SQLite file, read independently."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ackbridge.testing import BrokerHarness
from ackbridge.testing.faults import faults
from ackbridge_local.store import Store, dead_letter_queue


class LocalHarness(BrokerHarness):
    name = "embedded"
    can_hold_confirms = True

    def __init__(self, directory: Path) -> None:
        self.path = directory / "broker.db"
        self._store = Store(str(self.path), lease_timeout=30.0, fsync=False)

    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"local://{self.path}" + (f"?{query}" if query else "")

    def new_queue(self, *, dead_letter: bool = True) -> str:
        name = f"q-{uuid.uuid4().hex[:10]}"
        self._store.declare(name, dead_letter)
        return name

    def oversized_body(self) -> bytes:
        return b"x" * (16 * 1024 * 1024 + 1)

    def ready(self, queue: str) -> int:
        return self._store.counts(queue)[0]

    def unacked(self, queue: str) -> int:
        return self._store.counts(queue)[1]

    def ready_and_leased_everywhere(self) -> tuple[int, int]:
        """(ready, leased) over every queue of the file."""
        return self._store.totals()

    def owner_ids(self) -> list[str]:
        return self._store.owner_ids()

    def dead_lettered(self, queue: str) -> list[bytes]:
        return self._store.bodies(dead_letter_queue(queue))

    def break_connection(self, connection: Any) -> None:
        faults(connection).sever("test cut the connection")

    @contextlib.contextmanager
    def hold_confirms(self, connection: Any) -> Iterator[None]:
        faults(connection).hold_writes(True)
        try:
            yield
        finally:
            faults(connection).hold_writes(False)

    def cleanup(self) -> None:
        self._store.close()
