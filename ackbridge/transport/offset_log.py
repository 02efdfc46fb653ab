"""Offset logs: brokers that keep messages in an append-only log read by offset.

A queue forgets a message once it is acked, so a reader must hold each
delivery until its batch commits. A log (RabbitMQ streams) keeps every message
at a fixed offset, so a reader can be told "read partition P from offset A to
B" and any number of readers, on any host, read the same records again. That
is what lets the Spark source plan offset ranges on the driver and read them
on executors; "settling" becomes storing the consumer's next offset on the
broker once the batch has committed, which the settlement model calls a
cumulative ack.

A plugin whose broker keeps such logs registers, beside its transports, an
``offset_log`` factory in its :class:`~ackbridge.plugins.AdapterSpec`; users
and the Spark connector open one with :func:`open_offset_log`. The contract
is sync and small on purpose: every call is one request to the broker.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.errors import ConfigurationError, UnsupportedVerbError
from ackbridge.messages import InboundMessage


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    partition: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ConfigurationError(f"bad offset range {self.start}..{self.end} of {self.partition!r}")

    @property
    def count(self) -> int:
        """Offsets in the range: an upper bound on its records (retention may have
        removed some, and a broker may spend offsets on its own records, such as
        RabbitMQ's offset-tracking entries)."""
        return self.end - self.start


@dataclass(frozen=True)
class LogRecord:
    """One message read from a log, with where it sits."""

    partition: str
    offset: int
    message: InboundMessage


class OffsetLog(abc.ABC):
    """One connection to a log broker. Not thread-safe: one per thread or process.

    Offsets are the broker's own (RabbitMQ stream offsets). A *partition* is one
    log: a stream, or one partition of a super stream. A *reference* names a
    reader whose progress the broker stores (what other tools show as the
    consumer's offset).
    """

    @abc.abstractmethod
    def partitions(self, source: str) -> list[str]:
        """The logs behind *source*: the partitions of a super stream, or the
        stream itself. Raises BrokerError when *source* does not exist."""

    @abc.abstractmethod
    def bounds(self, partition: str) -> tuple[int, int]:
        """``(first, end)``: the first offset still held and one past the last
        committed one. ``first == end`` when the log holds nothing readable."""

    @abc.abstractmethod
    def read(self, offsets: OffsetRange) -> Iterator[LogRecord]:
        """Every record of *offsets* still held, in offset order; records the
        broker's retention removed are skipped (the caller sees the gap by
        offset). Ends once offset ``end - 1`` is passed; never returns a record
        outside the range."""

    @abc.abstractmethod
    def stored_offset(self, partition: str, reference: str) -> int | None:
        """The next offset *reference* has to read, as stored on the broker;
        None if it never stored one."""

    @abc.abstractmethod
    def store_offset(self, partition: str, reference: str, next_offset: int) -> None:
        """Record on the broker that *reference* has processed every offset
        below *next_offset* of *partition* (the cumulative ack of a log).
        ``next_offset=0`` may store nothing (a broker that stores "the last
        offset processed" has none to store); :meth:`stored_offset` then stays None."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection. Closing twice is harmless."""

    def __enter__(self) -> OffsetLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_offset_log(url: str, **options: Any) -> OffsetLog:
    """Open an :class:`OffsetLog` on the broker at *url*; its scheme picks the
    plugin. Raises UnsupportedVerbError where that broker keeps no offset log."""
    # Imported here: the plugin registry (and asyncio under it) only when a log is opened.
    from ackbridge.plugins import registry
    from ackbridge.urls import parse_url

    parsed = parse_url(url)
    spec = registry().adapter(parsed.scheme)
    if spec.offset_log is None:
        raise UnsupportedVerbError(
            spec.name, "offset log", f"{parsed.scheme}:// keeps messages in queues, not in logs read by offset "
            "(offset ranges need a log broker such as RabbitMQ streams)")
    given: dict[str, Any] = dict(parsed.query)
    given.update(options)
    return spec.offset_log(parsed, given)


def options_of(given: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    """*given* checked against the names an offset-log factory accepts (a plugin helper)."""
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigurationError(f"unknown offset-log option(s) {unknown}; known: {sorted(known)}")
    return dict(given)
