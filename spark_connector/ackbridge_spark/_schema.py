"""The source's row schema, and deliveries -> Arrow record batches."""

from __future__ import annotations

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
])


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _headers(headers: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    return [(str(k), _text(v)) for k, v in headers.items()]


def to_record_batch(rows: Sequence[tuple[int, Any]]) -> pa.RecordBatch:
    """Build one record batch from ``(offset, delivery)`` pairs (deliveries duck-typed)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    for offset, d in rows:
        cols["body"].append(bytes(d.body))
        cols["key"].append(d.routing_key)
        cols["topic"].append(d.source)
        cols["routing_key"].append(d.routing_key)
        cols["headers"].append(_headers(d.headers))
        cols["message_id"].append(d.message_id)
        cols["correlation_id"].append(d.correlation_id)
        ts = d.timestamp
        cols["timestamp"].append(None if ts is None else int(float(ts) * 1_000_000))
        cols["redelivered"].append(bool(d.redelivered))
        cols["delivery_count"].append(d.delivery_count)
        cols["broker"].append(d.broker)
        cols["offset"].append(offset)
    arrays = [pa.array(cols[f.name], type=f.type) for f in ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def from_ipc(data: bytes | pa.Buffer | pa.NativeFile) -> list[pa.RecordBatch]:
    reader = pa.ipc.open_stream(data)
    return list(reader)
