"""The source's row schema, and deliveries -> Arrow record batches."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA = StructType([
    StructField("body", BinaryType(), False),
    StructField("key", StringType(), True),
    StructField("topic", StringType(), True),
    StructField("routing_key", StringType(), True),
    StructField("headers", MapType(StringType(), StringType(), True), True),
    StructField("message_id", StringType(), True),
    StructField("correlation_id", StringType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("redelivered", BooleanType(), False),
    StructField("delivery_count", IntegerType(), True),
    StructField("broker", StringType(), False),
    StructField("offset", LongType(), False),
    StructField("source", StringType(), False),
])

ARROW_SCHEMA = pa.schema([
    pa.field("body", pa.binary(), False),
    pa.field("key", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("routing_key", pa.string()),
    pa.field("headers", pa.map_(pa.string(), pa.string())),
    pa.field("message_id", pa.string()),
    pa.field("correlation_id", pa.string()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("redelivered", pa.bool_(), False),
    pa.field("delivery_count", pa.int32()),
    pa.field("broker", pa.string(), False),
    pa.field("offset", pa.int64(), False),
    pa.field("source", pa.string(), False),
])


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type
_TIMESTAMP_TYPE = ARROW_SCHEMA.field("timestamp").type


def _headers_array(messages: Sequence[Any]) -> pa.Array:
    # Flattened keys/values plus offsets: most messages carry no headers, and
    # the per-row list of pairs pa.array() would need costs more than the rest.
    offsets = [0]
    keys: list[str] = []
    values: list[str | None] = []
    total = 0
    for m in messages:
        headers = m.headers
        if headers:
            for k, v in headers.items():
                keys.append(str(k))
                values.append(_text(v))
            total += len(headers)
        offsets.append(total)
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(values, pa.string()), type=_HEADERS_TYPE)


#: Largest data buffer of a ``binary`` column (32-bit offsets).
_BINARY_MAX = 2**31 - 1


class BodyScratch:
    """A buffer for the body column that one reader reuses from batch to batch.

    The body bytes are copied once, into memory the process already has: built
    anew per batch (``pa.array`` or ``bytes.join``), a batch of 4 KiB bodies
    takes ~100 MB of fresh pages, and faulting them in cost more CPU than the
    copy itself (~8 us per 4 KiB body on the 2-core test VM, against ~1-2 us
    into a reused buffer). Kept up to *keep* bytes: a larger batch gets a buffer
    of its own, freed with it. Reused only once no Arrow buffer of the last batch
    points into it any more (the view it handed out is gone); else a new one is made.
    """

    def __init__(self, keep: int = 256 * 1024 * 1024) -> None:
        self._keep = keep
        self._buf = bytearray()
        self._lent: weakref.ref[memoryview] | None = None

    def join(self, values: Sequence[Any], total: int) -> pa.Buffer:
        buf = self._buf
        if len(buf) < total or (self._lent is not None and self._lent() is not None):
            buf = bytearray(total)
            if total <= self._keep:
                self._buf = buf
        view = memoryview(buf)
        pos = 0
        for v in values:
            n = len(v)
            view[pos:pos + n] = v
            pos += n
        lent = view[:total]
        if buf is self._buf:
            self._lent = weakref.ref(lent)  # alive as long as an Arrow buffer holds it
        return pa.py_buffer(lent)


def _binary_array(values: list[Any], scratch: BodyScratch | None = None) -> pa.Array:
    """A non-null ``binary`` array of *values* (bytes-like), the bytes copied once.

    ``pa.array(values, pa.binary())`` appends value by value into a builder whose
    data buffer grows by doubling (copied again as it grows); here the bytes go
    once into a buffer of their total size, and the offsets are built in one call.
    """
    lengths = list(map(len, values))
    total = sum(lengths)
    if total > _BINARY_MAX:
        return pa.array(values, pa.binary())  # beyond 32-bit offsets: Arrow's own error
    try:
        data = scratch.join(values, total) if scratch is not None else pa.py_buffer(b"".join(values))
    except TypeError:  # not all bytes-like (e.g. str): Arrow converts them its own way
        return pa.array(values, pa.binary())
    offsets = pa.array(itertools.accumulate(lengths, initial=0), pa.int32())
    return pa.Array.from_buffers(pa.binary(), len(values), [None, offsets.buffers()[1], data], null_count=0)


def to_record_batch(rows: Sequence[tuple[int, Any]], names: Mapping[str, str] | None = None, *,
                    topic_from_routing_key: bool = False, scratch: BodyScratch | None = None) -> pa.RecordBatch:
    """Build one record batch from ``(offset, delivery)`` pairs (deliveries duck-typed).

    Column by column from the received messages (a delivery's ``_message``, or
    the delivery itself when it has none): this runs on the driver, in the
    critical path of every micro-batch, and per-row Python work is its cost.
    *names* maps a message's ``source`` to the source's name as configured (an
    MQTT filter's placeholder topic to the filter); with *topic_from_routing_key*
    (MQTT) the ``topic`` column is the topic the message was published to.
    With *scratch*, the body column lives in the scratch's buffer, which the next
    call with it reuses: the batch must be written out (or dropped) by then.
    """
    messages = [getattr(d, "_message", d) for _, d in rows]
    keys = [m.routing_key for m in messages]
    routing_key = pa.array(keys, pa.string())
    timestamps = [m.timestamp for m in messages]
    sources = [m.source for m in messages]
    topic = routing_key if topic_from_routing_key else pa.array(sources, pa.string())
    if names and any(k != v for k, v in names.items()):
        get = names.get
        sources = [get(x, x) for x in sources]
    arrays = [
        _binary_array([m.body for m in messages], scratch),
        routing_key,  # key
        topic,
        routing_key,
        _headers_array(messages),
        pa.array([m.message_id for m in messages], pa.string()),
        pa.array([m.correlation_id for m in messages], pa.string()),
        pa.array([None if ts is None else int(float(ts) * 1_000_000) for ts in timestamps], _TIMESTAMP_TYPE),
        pa.array([bool(m.redelivered) for m in messages], pa.bool_()),
        pa.array([m.delivery_count for m in messages], pa.int32()),
        pa.array([d.broker for _, d in rows], pa.string()),
        pa.array([offset for offset, _ in rows], pa.int64()),
        pa.array(sources, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def from_ipc(data: bytes | pa.Buffer | pa.NativeFile) -> list[pa.RecordBatch]:
    reader = pa.ipc.open_stream(data)
    return list(reader)
