"""The RabbitMQ plugin's short path for deliveries gives consumers exactly what pika's does.

The same inbound byte stream, cut into the same random reads, goes through a
``DecodingConnection`` and through pika's own ``SelectConnection`` (neither
ever connects: their I/O loop never runs); every consumer callback must see
the same channel, method fields, properties and body, in the same order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pika import exceptions, frame, spec
from pika.adapters.select_connection import IOLoop
from pika.channel import Channel

from ackbridge_rabbitmq.deliveries import DecodingConnection

# Short strings up to their 255-byte limit, and raw bytes (pika hands back bytes that are not UTF-8).
_text = st.text(max_size=12) | st.text(alphabet="a", min_size=200, max_size=255) | st.text(alphabet="é", max_size=127)
_short = _text | st.binary(max_size=12)
_properties = st.builds(
    pika.BasicProperties,
    content_type=st.none() | _text,
    headers=st.none() | st.dictionaries(st.text(max_size=6), st.integers(-2**40, 2**40) | st.text(max_size=6),
                                        max_size=3),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    correlation_id=st.none() | _text,
    message_id=st.none() | _text,
    timestamp=st.none() | st.integers(0, 2**40),
    app_id=st.none() | _text,
)


@st.composite
def deliveries(draw: Any) -> tuple[bytes, int]:
    """Marshaled frames of one delivery (its body maybe cut into several body frames), or a heartbeat."""
    if draw(st.integers(0, 9)) == 0:
        return frame.Heartbeat().marshal(), 0
    channel = draw(st.sampled_from([1, 2, 5]))  # 5: a channel the connection does not know
    method = spec.Basic.Deliver(consumer_tag=draw(st.sampled_from(["ctag-1", "ctag-2", "gone"])),
                                delivery_tag=draw(st.integers(1, 2**64 - 1)), redelivered=draw(st.booleans()),
                                exchange=draw(_short), routing_key=draw(_short))
    body = draw(st.binary(max_size=600))
    cuts = sorted(draw(st.lists(st.integers(1, len(body) - 1), max_size=3, unique=True))) if len(body) > 1 else []
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)] if body else []
    out = [frame.Method(channel, method).marshal(), frame.Header(channel, len(body), draw(_properties)).marshal()]
    out += [frame.Body(channel, piece).marshal() for piece in pieces]
    return b"".join(out), channel


#: Every IOLoop made here (each holds a waker socket pair), closed after the test.
_IOLOOPS: list[IOLoop] = []


@pytest.fixture(autouse=True)
def _close_ioloops() -> Iterator[None]:
    yield
    while _IOLOOPS:
        _IOLOOPS.pop().close()


def _connection(cls: type[Any], got: list[tuple[Any, ...]]) -> Any:
    ioloop = IOLoop()
    _IOLOOPS.append(ioloop)
    conn = cls(pika.ConnectionParameters(host="127.0.0.1", port=9), custom_ioloop=ioloop)
    conn.connection_state = conn.CONNECTION_OPEN
    for number in (1, 2):
        channel = Channel(conn, number, lambda _ch: None)
        channel._set_state(channel.OPEN)
        for tag in ("ctag-1", "ctag-2"):
            channel._consumers[tag] = lambda ch, m, p, b, tag=tag: got.append(
                (ch.channel_number, tag, m.consumer_tag, m.delivery_tag, m.redelivered, m.exchange, m.routing_key,
                 dict(vars(p)), b))
        conn._channels[number] = channel
    return conn


@settings(max_examples=300, deadline=None)
@given(stream=st.lists(deliveries(), min_size=1, max_size=12), cuts=st.lists(st.integers(1, 4000), max_size=8))
def test_consumers_see_what_pika_gives_them(stream: list[tuple[bytes, int]], cuts: list[int]) -> None:
    data = b"".join(frames for frames, _ in stream)
    reads, start = [], 0
    for cut in sorted({c for c in cuts if c < len(data)}):
        reads.append(data[start:cut])
        start = cut
    reads.append(data[start:])
    ours: list[tuple[Any, ...]] = []
    pikas: list[tuple[Any, ...]] = []
    short, plain = _connection(DecodingConnection, ours), _connection(pika.SelectConnection, pikas)
    logging.disable(logging.CRITICAL)  # unknown channel / consumer tag: both log, as pika does
    try:
        for chunk in reads:
            short._on_data_available(chunk)
            plain._on_data_available(chunk)
    finally:
        logging.disable(logging.NOTSET)
    assert ours == pikas
    assert (short.bytes_received, short.frames_received) == (plain.bytes_received, plain.frames_received)
    assert short._frame_buffer == plain._frame_buffer == b""


def test_whole_small_deliveries_take_the_short_path() -> None:
    got: list[tuple[Any, ...]] = []
    conn = _connection(DecodingConnection, got)
    props = pika.BasicProperties(message_id="m", headers={"x": 1})
    data = b"".join(frame.Method(1, spec.Basic.Deliver("ctag-1", tag, False, "", "q")).marshal()
                    + frame.Header(1, 3, props).marshal() + frame.Body(1, b"abc").marshal() for tag in range(1, 101))
    conn._on_data_available(data)
    assert conn.short_path_deliveries == 100
    assert [g[3] for g in got] == list(range(1, 101))


def test_bad_frame_end_is_refused_as_pika_refuses_it() -> None:
    conn = _connection(DecodingConnection, [])
    data = bytearray(frame.Method(1, spec.Basic.Deliver("ctag-1", 1, False, "", "q")).marshal()
                     + frame.Header(1, 1, pika.BasicProperties()).marshal() + frame.Body(1, b"a").marshal())
    data[-1] = 0
    with pytest.raises(exceptions.InvalidFrameError):
        conn._on_data_available(bytes(data))


def test_frames_after_a_broker_close_go_as_pikas_do() -> None:
    def delivery(tag: int) -> bytes:
        return (frame.Method(1, spec.Basic.Deliver("ctag-1", tag, False, "", "q")).marshal()
                + frame.Header(1, 3, pika.BasicProperties()).marshal() + frame.Body(1, b"abc").marshal())

    data = delivery(1) + frame.Method(0, spec.Connection.Close(320, "bye", 0, 0)).marshal() + delivery(2)
    seen = []
    for cls in (DecodingConnection, pika.SelectConnection):
        got: list[tuple[Any, ...]] = []
        conn = _connection(cls, got)
        logging.disable(logging.CRITICAL)
        try:
            conn._on_data_available(data[:-5])
            conn._on_data_available(data[-5:])
        finally:
            logging.disable(logging.NOTSET)
        seen.append((got, conn.connection_state, conn._frame_buffer, conn.bytes_received))
    assert seen[0] == seen[1]
    assert [g[3] for g in seen[0][0]] == [1, 2]


def test_a_method_frame_with_trailing_bytes_goes_as_pikas_does() -> None:
    method = frame.Method(1, spec.Basic.Deliver("ctag-1", 9, False, "", "q")).marshal()
    # Three stray bytes inside the method frame's payload (its size field grows to match).
    padded = method[:3] + (int.from_bytes(method[3:7], "big") + 3).to_bytes(4, "big") + method[7:-1] + b"xyz\xce"
    data = padded + frame.Header(1, 3, pika.BasicProperties()).marshal() + frame.Body(1, b"abc").marshal()
    seen = []
    for cls in (DecodingConnection, pika.SelectConnection):
        got: list[tuple[Any, ...]] = []
        conn = _connection(cls, got)
        conn._on_data_available(data)
        seen.append((got, conn.bytes_received, conn.frames_received))
    assert seen[0] == seen[1]
    assert [g[3] for g in seen[0][0]] == [9]


def _delivery(tag: int, body: bytes = b"abc") -> bytes:
    return (frame.Method(1, spec.Basic.Deliver("ctag-1", tag, False, "", "q")).marshal()
            + frame.Header(1, len(body), pika.BasicProperties()).marshal() + frame.Body(1, body).marshal())


def test_a_consumer_that_raises_leaves_no_delivery_unread() -> None:
    """As in pika, a delivery is consumed from the buffer before its consumer runs."""
    seen = []
    for cls in (DecodingConnection, pika.SelectConnection):
        tags: list[int] = []
        conn = _connection(cls, [])

        def consumer(ch: Any, m: Any, p: Any, b: bytes, tags: list[int] = tags) -> None:
            tags.append(m.delivery_tag)
            if m.delivery_tag == 1:
                raise RuntimeError("consumer failed")

        conn._channels[1]._consumers["ctag-1"] = consumer
        with pytest.raises(RuntimeError):
            conn._on_data_available(_delivery(1) + _delivery(2))
        conn._on_data_available(_delivery(3))
        seen.append((tags, conn.bytes_received, conn.frames_received, conn._frame_buffer))
    assert seen[0] == seen[1]
    assert seen[0][0] == [1, 2, 3]


def test_left_over_assembler_state_goes_to_pika() -> None:
    """A stray header and body (a protocol violation) reach pika's assembler, as without the short path."""
    stray = frame.Header(1, 10, pika.BasicProperties()).marshal() + frame.Body(1, b"XYZ").marshal()
    seen = []
    for cls in (DecodingConnection, pika.SelectConnection):
        got: list[tuple[Any, ...]] = []
        conn = _connection(cls, got)
        try:
            conn._on_data_available(stray)
            conn._on_data_available(_delivery(1, b"0123456"))
            outcome: Any = None
        except Exception as exc:  # whatever pika raises, both must raise it
            outcome = type(exc)
        assembler = conn._channels[1]._content_assembler
        seen.append((got, outcome, assembler._seen_so_far, conn.bytes_received))
    assert seen[0] == seen[1]
