"""An in-process offset log, registered as a plugin (``fakelog://NAME``) for the
planning tests of the executor-side source. Every connection to the same NAME
sees one shared :class:`FakeBroker`: its logs, its stored offsets, and knobs to
make it misbehave the way a real broker can (retention, a dropped connection)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pluggy

from ackbridge.errors import BrokerError, ConnectionLostError
from ackbridge.messages import InboundMessage
from ackbridge.plugins import registry
from ackbridge.transport.offset_log import LogRecord, OffsetLog, OffsetRange, options_of
from ackbridge.urls import BrokerURL

SCHEME = "fakelog"
hookimpl = pluggy.HookimplMarker("ackbridge")


@dataclass
class FakeBroker:
    #: source -> its partitions (a plain stream lists itself).
    sources: dict[str, list[str]] = field(default_factory=dict)
    #: partition -> bodies by offset (index = offset); None where retention removed one.
    logs: dict[str, list[bytes | None]] = field(default_factory=dict)
    stored: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Calls to store_offset, in order: (partition, reference, next_offset).
    stores: list[tuple[str, str, int]] = field(default_factory=list)
    opened: int = 0
    #: The next this-many calls to read() fail after yielding one record.
    fail_reads: int = 0
    fail_stores: int = 0

    def stream(self, name: str, n: int = 0, *, partitions: int = 0) -> list[str]:
        parts = [f"{name}-{i}" for i in range(partitions)] if partitions else [name]
        self.sources[name] = parts
        for p in parts:
            self.logs.setdefault(p, [])
        for i in range(n):
            self.append(parts[i % len(parts)], f"{name}-m{i}".encode())
        return parts

    def append(self, partition: str, body: bytes) -> int:
        self.logs[partition].append(body)
        return len(self.logs[partition]) - 1

    def truncate(self, partition: str, first: int) -> None:
        """Retention: offsets below *first* are gone."""
        log = self.logs[partition]
        for i in range(min(first, len(log))):
            log[i] = None


BROKERS: dict[str, FakeBroker] = {}


class FakeLog(OffsetLog):
    def __init__(self, broker: FakeBroker) -> None:
        self.b = broker
        self.closed = False
        broker.opened += 1

    def _live(self) -> None:
        if self.closed:
            raise ConnectionLostError("fake log closed")

    def partitions(self, source: str) -> list[str]:
        self._live()
        if source not in self.b.sources:
            raise BrokerError(f"no stream {source!r}")
        return list(self.b.sources[source])

    def bounds(self, partition: str) -> tuple[int, int]:
        self._live()
        log = self.b.logs[partition]
        first = next((i for i, body in enumerate(log) if body is not None), len(log))
        return first, len(log)

    def read(self, offsets: OffsetRange) -> Iterator[LogRecord]:
        self._live()
        log = self.b.logs[offsets.partition]
        yielded = 0
        for offset in range(offsets.start, min(offsets.end, len(log))):
            body = log[offset]
            if body is None:
                continue
            if self.b.fail_reads and yielded == 1:
                self.b.fail_reads -= 1
                self.closed = True
                raise ConnectionLostError("fake log dropped the connection")
            message = InboundMessage(wire_tag=offset, generation=1, body=body, source=offsets.partition,
                                     message_id=body.decode(), timestamp=1_700_000_000.0 + offset)
            yielded += 1
            yield LogRecord(offsets.partition, offset, message)

    def stored_offset(self, partition: str, reference: str) -> int | None:
        self._live()
        return self.b.stored.get((partition, reference))

    def store_offset(self, partition: str, reference: str, next_offset: int) -> None:
        self._live()
        if self.b.fail_stores:
            self.b.fail_stores -= 1
            self.closed = True
            raise ConnectionLostError("fake log dropped the connection while storing")
        self.b.stored[(partition, reference)] = next_offset
        self.b.stores.append((partition, reference, next_offset))

    def close(self) -> None:
        self.closed = True


def _open(url: BrokerURL, options: dict[str, Any]) -> OffsetLog:
    options_of(options, {"heartbeat", "connect_timeout"})
    return FakeLog(BROKERS.setdefault(url.host or "default", FakeBroker()))


@hookimpl
def ackbridge_register_adapters(register: Any) -> None:
    # The embedded broker's transport stands in: the source only needs its option table.
    register(dataclasses.replace(registry().adapter("local"), name="fakelog", schemes=(SCHEME,), offset_log=_open))


def install() -> None:
    """Register ``fakelog://`` in this process (idempotent)."""
    import sys

    reg = registry()
    if SCHEME not in reg.adapters:
        reg.add_entry_point("fakelog-test", "tests.spark.fake_log", sys.modules[__name__])


def uninstall() -> None:
    reg = registry()
    reg.adapters.pop(SCHEME, None)
    if reg.manager.has_plugin("fakelog-test"):
        reg.manager.unregister(name="fakelog-test")
    reg.statuses[:] = [s for s in reg.statuses if s.name != "fakelog-test"]
