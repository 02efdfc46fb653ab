"""The records the plugin writes are AMQP 1.0 messages every reader takes: rstream's
``amqp_decoder`` (the plugin's own consumer), proton (an AMQP 1.0 library of another
lineage) and RabbitMQ itself, which converts them for an AMQP 0-9-1 consumer of the stream.
On the fast path the common sections are written and read by hand
(ackbridge_rabbitmq_streams.sections): the bytes must be rstream's encoder's, byte for
byte, and the reader must tell what rstream's decoder tells."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message
from rstream import AMQPMessage, Properties, amqp_decoder

import ackbridge
from ackbridge.messages import OutboundMessage
from ackbridge.transport.faults import transport_of
from ackbridge_rabbitmq_streams import codec, fastpath, sections
from tests.rabbitmq_streams.streams import URL, StreamAdmin

#: described(0x75 = data), vbin8 of length 0.
_EMPTY_DATA = b"\x00\x53\x75\xa0\x00"
_text = st.none() | st.text(max_size=300)
_header_values = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=40) | st.binary(
    max_size=40) | st.floats(allow_nan=False)
messages = st.builds(
    OutboundMessage,
    body=st.binary(max_size=600),
    headers=st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda k: k != codec.BINARY), _header_values,
                            max_size=4),
    message_id=_text,
    correlation_id=_text,
    reply_to=_text,
    content_type=st.none() | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=300),
    timestamp=st.none() | st.integers(-(10**12), 10**13).map(lambda ms: ms / 1000),
)


def _rstream_encoding(message: OutboundMessage) -> bytes:
    """What rstream's own encoder writes for *message* (every properties field, nulls too),
    and for an empty body the empty data section rstream leaves out (RabbitMQ needs it)."""
    headers: dict[str | bytes, Any] = {key: value for key, value in message.headers.items()}
    binary = sorted(k for k, v in message.headers.items() if isinstance(v, bytes))
    if binary:
        headers[codec.BINARY] = json.dumps(binary)
    data = bytes(AMQPMessage(body=message.body, application_properties=headers or None, properties=Properties(
        message_id=message.message_id, correlation_id=message.correlation_id, reply_to=message.reply_to,
        content_type=message.content_type,
        creation_time=None if message.timestamp is None else round(message.timestamp * 1000))))
    return data if message.body else data + _EMPTY_DATA


def _through_proton(data: bytes) -> tuple[Any, ...]:
    decoded = Message()
    decoded.decode(data)
    # proton hands binary out as memoryviews of its own buffers: copied before it frees them.
    body: Any = decoded.body
    properties: dict[Any, Any] = decoded.properties or {}
    headers = {k: bytes(v) if isinstance(v, memoryview) else v for k, v in properties.items()}
    return (decoded.id, decoded.correlation_id, decoded.reply_to, decoded.content_type or None,
            decoded.creation_time, headers, b"" if body is None else bytes(body))


@settings(max_examples=600, deadline=None)
@given(messages)
def test_the_hand_written_record_is_rstreams_byte_for_byte(message: OutboundMessage) -> None:
    expected = _rstream_encoding(message)
    assert codec.encode(message, fast=True) == expected
    assert codec.encode(message, fast=False) == expected
    assert codec.encode_public(message) == expected


@settings(max_examples=200, deadline=None)
@given(messages)
def test_proton_reads_what_rstream_writes(message: OutboundMessage) -> None:
    assert _through_proton(codec.encode(message, fast=True)) == _through_proton(_rstream_encoding(message))


@settings(max_examples=400, deadline=None)
@given(messages, st.booleans())
def test_the_plugin_decodes_what_it_encodes(message: OutboundMessage, fast: bool) -> None:
    data = codec.encode(message, fast=fast)
    back = codec.decode(data, source="s", offset=0, wire_tag=0, generation=1, fast=fast)
    assert (back.body, dict(back.headers), back.message_id, back.correlation_id, back.reply_to,
            back.content_type) == (message.body, dict(message.headers), message.message_id,
                                   message.correlation_id, message.reply_to, message.content_type)
    if message.timestamp is not None:
        assert back.timestamp == round(message.timestamp * 1000) / 1000
    else:
        assert back.timestamp is None
    raw = amqp_decoder(data)
    assert raw.body == message.body or (raw.body is None and message.body == b"")


_ids = _text | st.integers(0, 2**64 - 1) | st.uuids() | st.binary(max_size=300)
foreign = st.builds(  # what another client (rstream's producer) writes: any id type, every field
    lambda body, mid, cid, rt, ct, ts, to: bytes(AMQPMessage(body=body, properties=Properties(
        message_id=mid, correlation_id=cid, reply_to=rt, content_type=ct, creation_time=ts, to=to))),
    st.binary(min_size=1, max_size=600), _ids, _ids, _text, _text, st.none() | st.integers(-(2**63), 2**63 - 1),
    _text) | st.binary(max_size=600).map(lambda body: bytes(AMQPMessage(body=body)))  # a body alone


def _fields(message: Any) -> tuple[Any, ...]:
    return (message.body, dict(message.headers), message.message_id, message.correlation_id, message.reply_to,
            message.content_type, message.timestamp)


@settings(max_examples=400, deadline=None)
@given(st.one_of(messages.map(codec.encode_public), foreign))
def test_the_common_records_read_as_rstream_reads_them(data: bytes) -> None:
    """decode() reads a properties + data record by hand: what rstream's decoder tells."""
    fast = codec.decode(data, source="s", offset=0, wire_tag=0, generation=1, fast=True)
    slow = codec.through_rstream(data, source="s", wire_tag=0, generation=1)
    assert _fields(fast) == _fields(slow)


@pytest.mark.parametrize("message_id", [0, 255, 256, 2**32, 2**63, 2**64 - 1, b"\xff", "x" * 300,
                                        uuid.UUID(int=2**128 - 1)])
def test_every_id_type_reads_as_rstream_reads_it(message_id: Any) -> None:
    data = bytes(AMQPMessage(body=b"b", properties=Properties(message_id=message_id, creation_time=-1)))
    fast = codec.decode(data, source="s", offset=0, wire_tag=0, generation=1, fast=True)
    assert _fields(fast) == _fields(codec.through_rstream(data, source="s", wire_tag=0, generation=1))
    assert fast.message_id == (message_id.decode("utf-8", "replace") if isinstance(message_id, bytes)
                               else str(message_id))


@pytest.mark.parametrize("message", [
    OutboundMessage(b"b", message_id="m", correlation_id="c", reply_to="r", content_type="t", timestamp=1.5),
    OutboundMessage(b"b", message_id="m"), OutboundMessage(b"")])
def test_the_fast_reader_builds_the_public_paths_message(message: OutboundMessage) -> None:
    """Every field of the delivery, the transport's (tag, generation, source, redelivered) too: the
    fast reader builds InboundMessage positionally, a field order changed in the core shows here."""
    data = codec.encode(message, fast=True)
    fast = codec.decode(data, source="src", offset=7, wire_tag=7, generation=3, redelivered=True, fast=True)
    slow = codec.through_rstream(data, source="src", wire_tag=7, generation=3, redelivered=True)
    assert dataclasses.astuple(fast) == dataclasses.astuple(slow)


def test_a_damaged_field_count_is_left_to_rstream_without_a_list_that_size() -> None:
    """A list32 properties section whose count claims more fields than it has bytes."""
    record = bytearray(codec.encode(OutboundMessage(b"b", message_id="m" * 300), fast=True))
    assert record[3] == 0xD0  # list32: size at 4..8, count at 8..12
    record[8:12] = b"\xff\xff\xff\xff"
    assert sections.properties_and_body(bytes(record)) is None


def _properties_record(fields: list[bytes]) -> bytes:
    encoded = b"".join(fields)
    return b"\x00\x53\x73\xc0" + bytes((len(encoded) + 1, len(fields))) + encoded + b"\x00\x53\x75\xa0\x01z"


def test_a_timestamp_as_an_id_and_text_as_creation_time_are_left_to_rstream() -> None:
    """Records no encoder here writes (another client's): the hand reader leaves them to
    rstream's decoder, which tells the timestamp as a number, and text as creation time is no
    timestamp (and no crash)."""
    stamp = b"\x83" + (1_700_000_000_123).to_bytes(8, "big")
    as_id = _properties_record([stamp] + [b"\x40"] * 12)
    assert sections.properties_and_body(as_id) is None
    read = codec.decode(as_id, source="s", offset=0, wire_tag=0, generation=1, fast=True)
    assert (read.message_id, read.body) == ("1700000000123", b"z")
    as_created = _properties_record([b"\x40"] * 9 + [b"\xa1\x01x"] + [b"\x40"] * 3)
    assert sections.properties_and_body(as_created) is None
    for fast in (True, False):
        read = codec.decode(as_created, source="s", offset=0, wire_tag=0, generation=1, fast=fast)
        assert (read.timestamp, read.body) == (None, b"z")


@pytest.mark.parametrize("size", [0, 1, 200, 254, 255, 256, 300, 70_000])
# 12 null fields and a str8 message id of 240/241/242 bytes: 254/255/256 bytes of fields,
# list8 below 255 bytes, list32 from there (rstream's choice).
@pytest.mark.parametrize("fields", [{}, {"message_id": "m" * 240}, {"message_id": "m" * 241},
                                    {"message_id": "m" * 242}, {"content_type": "c" * 300}])
def test_the_edges_of_each_encoding_are_rstreams(size: int, fields: dict[str, Any]) -> None:
    """vbin8/vbin32 at 255/256 bytes, list8/list32 at 255 bytes of fields, no data section
    for an empty body: as rstream writes them."""
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    message = OutboundMessage(body, **fields)
    assert codec.encode(message, fast=True) == _rstream_encoding(message)
    back = codec.decode(codec.encode(message, fast=True), source="s", offset=0, wire_tag=0, generation=1, fast=True)
    assert back.body == body and all(getattr(back, k) == v for k, v in fields.items())


def test_no_field_set_is_an_empty_properties_section_and_the_body() -> None:
    assert codec.encode(OutboundMessage(b"ab"), fast=True) == (
        b"\x00\x53\x73\xc0\x0e\x0d" + b"\x40" * 13 + b"\x00\x53\x75\xa0\x02ab")


def test_an_empty_body_is_an_empty_data_section_and_an_old_record_without_one_still_reads() -> None:
    for fast in (True, False):
        assert codec.encode(OutboundMessage(b"", message_id="m"), fast=fast).endswith(b"\x40" * 3 + _EMPTY_DATA)
    # What the plugin wrote for an empty body before (rstream's bytes alone): no body section.
    old = bytes(AMQPMessage(body=b"", properties=Properties(message_id="m")))
    for fast in (True, False):
        back = codec.decode(old, source="s", offset=0, wire_tag=0, generation=1, fast=fast)
        assert (back.body, back.message_id) == (b"", "m")


@pytest.mark.parametrize("size", [0, 5, 255, 256, 70_000])
@pytest.mark.parametrize("after", [b"\x00\x53\x78\xc1\x01\x00", b"\x00\x53\x75\xa0\x02cd"], ids=["footer", "2nd-data"])
def test_a_record_with_more_than_its_data_section_reads_as_rstream_reads_it(size: int, after: bytes) -> None:
    """A footer or a second data section after the body: the hand reader leaves the record to
    rstream's decoder (which keeps the last data section of several)."""
    body = b"b" * size
    for record in (bytes(AMQPMessage(body=body)) + after, codec.encode(OutboundMessage(body), fast=True) + after,
                   codec.encode(OutboundMessage(body, message_id="m"), fast=True) + after):
        fast = codec.decode(record, source="s", offset=0, wire_tag=0, generation=1, fast=True)
        assert _fields(fast) == _fields(codec.through_rstream(record, source="s", wire_tag=0, generation=1))


_PUBLISHED = [
    OutboundMessage(b"plain"),
    OutboundMessage(b""),
    OutboundMessage(b"", message_id="id-1", correlation_id="c-1", reply_to="r-1", content_type="text/plain",
                    headers={"n": 7, "s": "x", "b": b"\x00", "t": True}),
    OutboundMessage(b"y" * 300, message_id="i" * 300),
    OutboundMessage(b"z" * 70_000, content_type="c" * 256),
]


@pytest.mark.rabbitmq_streams
@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "public-path"])
def test_the_broker_stores_rstreams_bytes_and_rstream_reads_them(admin: StreamAdmin, fast: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Published through the plugin (either path), read back raw from the broker by rstream's
    client: each record is what rstream's encoder writes, and rstream's decoder reads it."""
    monkeypatch.setenv(fastpath.ENV, "1" if fast else "0")
    stream = admin.new_stream()
    with ackbridge.connect(URL) as conn:
        assert transport_of(conn).fast_path is fast  # type: ignore[attr-defined]
        for message in _PUBLISHED:
            conn.publish(stream, message.body, message_id=message.message_id,
                         correlation_id=message.correlation_id, reply_to=message.reply_to,
                         content_type=message.content_type, headers=dict(message.headers)).result(timeout=10)
    stored = [data for _, data in admin.records(stream)]
    assert stored == [_rstream_encoding(message) for message in _PUBLISHED]
    for data, message in zip(stored, _PUBLISHED, strict=True):
        read = amqp_decoder(data)
        assert (read.body or b"") == message.body
        assert read.properties.message_id == (None if message.message_id is None else message.message_id.encode())


@pytest.mark.rabbitmq_streams
@pytest.mark.rabbitmq
def test_an_amqp_091_consumer_of_the_stream_reads_every_field(admin: StreamAdmin) -> None:
    """RabbitMQ converts the records for an AMQP 0-9-1 consumer (x-stream-offset): it must
    parse the hand-written sections as the broker's own AMQP 1.0 decoder reads them."""
    stream = admin.new_stream()
    with ackbridge.connect(URL) as conn:
        conn.publish(stream, b"plain").result(timeout=10)
        conn.publish(stream, b"", message_id="id-1", correlation_id="c-1", reply_to="r-1",
                     content_type="text/plain", headers={"n": 7, "s": "x", "b": b"\x00", "t": True}).result(timeout=10)
        conn.publish(stream, b"y" * 300, message_id="i" * 300).result(timeout=10)
    admin.publish_batches(stream, [1], timestamp=1_700_000_000.0, content_type="a/b")
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=10)
        got: list[tuple[Any, ...]] = []
        for method, props, body in channel.consume(stream, arguments={"x-stream-offset": "first"},
                                                   inactivity_timeout=10):
            assert method is not None, f"only {len(got)} of 4 records reached the AMQP 0-9-1 consumer"
            headers = {k: v for k, v in (props.headers or {}).items() if k != "x-stream-offset"}
            got.append((body, props.message_id, props.correlation_id, props.reply_to, props.content_type,
                        props.timestamp, headers))
            channel.basic_ack(method.delivery_tag)
            if len(got) == 4:
                break
    finally:
        connection.close()
    assert got == [
        (b"plain", None, None, None, None, None, {}),
        (b"", "id-1", "c-1", "r-1", "text/plain", None,
         {"n": 7, "s": "x", "b": b"\x00", "t": True, codec.BINARY: '["b"]'}),
        # A message id past AMQP 0-9-1's short string travels as a header: parsed from a str32 all the same.
        (b"y" * 300, None, None, None, None, None, {"x-message-id": "i" * 300}),
        (b"m0", None, None, None, "a/b", 1_700_000_000, {}),
    ]
