"""The offset log of RabbitMQ streams: bounds, exact range reads, stored offsets.

A blocking :class:`~ackbridge.transport.offset_log.OffsetLog` over rstream, on one
stream connection driven by an event loop of its own thread. What it relies
on, each checked against RabbitMQ 3.10 by ``tests/rabbitmq_streams``:

- ``read`` subscribes at the range's start; the broker sends the whole chunk
  holding it, so records before ``start`` are skipped here, and the read ends
  at the first record at or past ``end`` (the rest of that chunk is dropped).
  The same range always yields the same records: a stream never rewrites an
  offset, and retention only ever removes a prefix.
- ``bounds`` comes from the first and the last chunk (RabbitMQ 3.10 has no
  stream-stats command): see :func:`~ackbridge_rabbitmq_streams.chunks.edge_chunk`.
  ``end`` is one past the last *message*; storing an offset writes a tracking
  record that takes an offset of its own, so offsets have gaps that no range
  read ever returns.
- The broker keeps, per reference, the offset of the last record processed
  (what RabbitMQ's clients store and resume after); this API speaks of the
  *next* offset, one more.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from rstream import exceptions as rx
from rstream.client import Client

from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError, InvalidOptionError
from ackbridge.options import CONNECTION_OPTIONS, ConnectionSettings, resolve_options
from ackbridge.transport.loop_thread import LoopThread
from ackbridge.transport.offset_log import LogRecord, OffsetLog, OffsetRange
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq_streams import codec, fastpath
from ackbridge_rabbitmq_streams.chunks import ChunkSubscription, SubscriptionIds, chunk_end, edge_chunk, records
from ackbridge_rabbitmq_streams.chunks import offset_spec as spec_of
from ackbridge_rabbitmq_streams.connection import close_client, open_client
from ackbridge_rabbitmq_streams.errors import stream_error
from ackbridge_rabbitmq_streams.naming import check_name
from ackbridge_rabbitmq_streams.options import LOG_OPTIONS, Endpoint

T = TypeVar("T")

def _sources(source: str) -> list[str]:
    names = [name.strip() for name in source.split(",")]
    if not source or any(not name for name in names):
        raise InvalidOptionError(f"bad stream list {source!r}: give a stream name or comma-separated names")
    return [check_name(name, "stream name") for name in names]


class StreamOffsetLog(OffsetLog):
    """Offset ranges of RabbitMQ streams (``rabbitmq-stream://`` URLs). A lost
    connection raises :class:`~ackbridge.errors.ConnectionLostError` once; the
    next call opens a new one."""

    def __init__(self, endpoint: Endpoint, *, read_timeout: float, read_credit: int) -> None:
        self._endpoint = endpoint
        self._read_timeout = read_timeout
        self._read_credit = read_credit
        #: Hand-written AMQP 1.0 reading (fastpath.py), decided when the log is created.
        self.fast_path = fastpath.enabled()
        self._loop = LoopThread("ackbridge-stream-log")
        self._client: Client | None = None
        self._ids = SubscriptionIds()
        self._generation = 0
        self._closed = False
        try:
            self._connect()
        except BaseException:
            self._loop.stop()
            raise

    @classmethod
    def open(cls, url: BrokerURL, options: dict[str, Any]) -> StreamOffsetLog:
        """The ``AdapterSpec.offset_log`` factory: shared connection options plus :data:`LOG_OPTIONS`."""
        resolved = resolve_options((*CONNECTION_OPTIONS, *LOG_OPTIONS), options, owner="rabbitmq-stream offset log")
        endpoint = Endpoint.resolve(url, ConnectionSettings.from_options(resolved))
        return cls(endpoint, read_timeout=resolved["read_timeout"], read_credit=resolved["read_credit"])

    def __repr__(self) -> str:
        return f"StreamOffsetLog({self._endpoint.redacted})"

    # -- plumbing -------------------------------------------------------------------

    def _connect(self) -> Client:
        if self._closed:
            raise ConnectionLostError(f"{self._endpoint.redacted}: the offset log is closed")
        if self._client is None or not self._client.is_connection_alive():
            if self._client is not None:
                self._loop.run(close_client(self._client))
            self._client = None
            self._ids = SubscriptionIds()
            name = f"ackbridge-log-{uuid.uuid4().hex[:8]}"
            self._client = self._loop.run(open_client(self._endpoint, name),
                                          self._endpoint.connection.connect_timeout * 3)
            self._generation += 1
        return self._client

    def _call(self, doing: str, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        try:
            return self._loop.run(coro, timeout if timeout is not None else self._endpoint.connection.connect_timeout
                                  * 3)
        except AckbridgeError:
            raise
        except Exception as exc:
            raise stream_error(exc, doing, self._endpoint.url) from None

    # -- the contract ---------------------------------------------------------------

    def partitions(self, source: str) -> list[str]:
        client = self._connect()
        names = _sources(source)
        for name in names:
            if not self._call(f"look up stream {name!r}", client.stream_exists(name)):
                raise BrokerError(
                    f"stream {name!r} does not exist on {self._endpoint.redacted} (super streams need RabbitMQ "
                    "3.11; on 3.10 give the streams that serve as partitions, comma-separated)",
                    rx.StreamDoesNotExist.code)
        return names

    def bounds(self, partition: str) -> tuple[int, int]:
        check_name(partition, "stream name")
        client = self._connect()
        first = self._call(f"find the first chunk of {partition!r}", edge_chunk(client, self._ids, partition, "first"))
        last = self._call(f"find the last chunk of {partition!r}", edge_chunk(client, self._ids, partition, "last"))
        if first is None or last is None:
            return 0, 0
        start = int(first.chunk_first_offset)
        return start, max(start, chunk_end(last))

    def read(self, offsets: OffsetRange) -> Iterator[LogRecord]:
        check_name(offsets.partition, "stream name")
        if offsets.count == 0:
            return
        client = self._connect()
        generation = self._generation
        doing = f"read {offsets.partition!r} {offsets.start}..{offsets.end}"
        sub = self._call(doing, ChunkSubscription.open(client, self._ids, offsets.partition,
                                                       spec_of(offsets.start), credit=self._read_credit))
        try:
            while True:
                chunk = self._call(doing, sub.next_chunk(self._read_timeout), self._read_timeout + 5)
                if chunk is None:
                    if not client.is_connection_alive():
                        raise ConnectionLostError(f"{doing} on {self._endpoint.redacted}: the connection closed")
                    raise ConnectionLostError(
                        f"{doing} on {self._endpoint.redacted}: no chunk within read_timeout={self._read_timeout} s "
                        "(does the range end past the last committed message?)")
                for offset, data in records(chunk):
                    if offset >= offsets.end:
                        return
                    if offset >= offsets.start:
                        yield LogRecord(offsets.partition, offset, codec.decode(
                            data, source=offsets.partition, offset=offset, wire_tag=offset, generation=generation,
                            fast=self.fast_path))
                if chunk_end(chunk) >= offsets.end:
                    return
                self._call(doing, sub.credit(1))
        finally:
            if not self._loop.loop.is_closed():
                self._loop.run(sub.close(), 10)

    def stored_offset(self, partition: str, reference: str) -> int | None:
        check_name(partition, "stream name")
        check_name(reference, "reference")
        client = self._connect()
        try:
            last_done = self._loop.run(client.query_offset(partition, reference),
                                       self._endpoint.connection.connect_timeout * 3)
        except rx.OffsetNotFound:
            return None
        except AckbridgeError:
            raise
        except Exception as exc:
            raise stream_error(exc, f"query the offset of {reference!r} on {partition!r}",
                               self._endpoint.url) from None
        return int(last_done) + 1

    def store_offset(self, partition: str, reference: str, next_offset: int) -> None:
        check_name(partition, "stream name")
        check_name(reference, "reference")
        if next_offset < 0:
            raise InvalidOptionError(f"cannot store offset {next_offset} (offsets start at 0)")
        if next_offset == 0:
            return  # nothing processed yet: the broker has no "before the first" offset to hold
        client = self._connect()
        doing = f"store the offset of {reference!r} on {partition!r}"
        # StoreOffset has no answer; the round trip after it makes a missing stream or
        # a lost connection show here rather than silently.
        self._call(doing, client.store_offset(partition, reference, next_offset - 1))
        if not self._call(doing, client.stream_exists(partition)):
            raise BrokerError(f"{doing} on {self._endpoint.redacted}: the stream does not exist",
                              rx.StreamDoesNotExist.code)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            try:
                self._loop.run(close_client(client), 15)
            except (TimeoutError, asyncio.CancelledError, RuntimeError):
                pass
        self._loop.stop()


class _Factory:
    """The ``AdapterSpec.offset_log`` factory, with the options it takes beside the
    shared connection options (``option_specs``, read by the Spark source to check
    a query's options before any executor opens a log)."""

    option_specs = LOG_OPTIONS

    def __call__(self, url: BrokerURL, options: dict[str, Any]) -> StreamOffsetLog:
        return StreamOffsetLog.open(url, options)


open_stream_log = _Factory()
