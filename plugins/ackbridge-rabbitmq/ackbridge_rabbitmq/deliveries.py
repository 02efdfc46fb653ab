"""Inbound frames with a short path for Basic.Deliver (no I/O of its own).

pika decodes every inbound frame generically: a method object looked up by
index, a frame wrapper, a search of its callback manager for a waiter, the
channel's content assembler, a short-string decode that slices twice. A
delivery is three frames (method, content header, body), and in py-spy that
machinery was ~65% of the I/O thread of a consumer taking 16,000 msgs/s; raw
pika pays it too. :class:`DecodingConnection` takes a delivery whose three
frames are all in the buffer and whose body fits one frame, checks every
envelope as pika does, decodes the Basic.Deliver fields with one struct call
per field, lets pika's own ``BasicProperties.decode`` read the properties,
and hands the result to the channel's ``_on_deliver``: pika's consumer
dispatch, with its cancelled-consumer and unknown-tag handling. Every other
frame, and any delivery this path does not take, goes through pika's
``_process_frame`` unchanged, in stream order.

``_on_data_available``, ``_frame_buffer``, ``_channels``, ``bytes_received``
and ``frames_received`` are pika's connection internals: ``fastpath.py`` checks
the pika version and these names at import and uses plain pika otherwise. A
test feeds the same bytes through this path and pika's and compares what the
consumers receive. Unlike pika's loop, this one works on a local buffer: a
consumer callback must not feed the connection more data from inside itself
(the plugin's callbacks only hand deliveries to the core).
"""

from __future__ import annotations

import struct
from typing import Any

from pika import exceptions, frame, spec

from ackbridge_rabbitmq.coalescing import CoalescingConnection

_ENVELOPE = struct.Struct(">BHI")  # frame type, channel, payload size
_INDEX = struct.Struct(">I")
_TAG_AND_BITS = struct.Struct(">QB")
_HEADER_START = struct.Struct(">HHQ")  # class id, weight, body size
_METHOD, _HEADER, _BODY = spec.FRAME_METHOD, spec.FRAME_HEADER, spec.FRAME_BODY
_FRAME_END = spec.FRAME_END
_DELIVER_INDEX = spec.Basic.Deliver.INDEX
_BASIC_CLASS = spec.Basic.INDEX
#: Bytes read per recv(): pika's default is 4096, ~10 small deliveries per trip
#: round its I/O loop. Larger reads cost this path nothing extra (it keeps an
#: offset instead of re-slicing its buffer per frame).
RECV_BYTES = 64 * 1024


def _short_string(buf: bytes, offset: int) -> tuple[str | bytes, int]:
    """pika's ``decode_short_string``: UTF-8 when it decodes, the raw bytes when not."""
    end = offset + 1 + buf[offset]
    raw = buf[offset + 1:end]
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError:
        return raw, end


class DecodingConnection(CoalescingConnection):
    """pika's SelectConnection with the short path for deliveries (and coalesced writes)."""

    #: Deliveries taken by the short path (for tests).
    short_path_deliveries = 0
    #: pika's unread input (set by its ``_init_connection_state``; pika ships no types).
    _frame_buffer: bytes

    def _proto_connection_made(self, transport: Any) -> None:
        # An instance attribute overrides the transport class's 4096 for this stream only.
        transport._MAX_RECV_BYTES = RECV_BYTES
        super()._proto_connection_made(transport)

    def _on_data_available(self, data_in: bytes) -> None:
        if not self.is_open:
            # Handshake and close: pika's own path (it also reads a protocol header).
            super()._on_data_available(data_in)
            return
        buf = self._frame_buffer + data_in if self._frame_buffer else data_in
        size = len(buf)
        pos = 0
        closing = False
        try:
            while size - pos >= 7:
                kind, channel, length = _ENVELOPE.unpack_from(buf, pos)
                end = pos + length + 8
                if end > size:
                    break
                if kind == _METHOD and length >= 4 and _INDEX.unpack_from(buf, pos + 7)[0] == _DELIVER_INDEX:
                    taken, delivery = self._take_delivery(buf, pos, end, channel)
                    if taken == 0:
                        break  # the rest of this delivery has not arrived yet
                    if delivery is not None:
                        # Past this delivery before its consumer runs (as pika trims before it
                        # processes): if the callback raises, the delivery is not left unread.
                        target, method_frame, header_frame, frames, body = delivery
                        self.bytes_received += taken - pos
                        self.frames_received += frames
                        self.short_path_deliveries += 1
                        pos = taken
                        target._on_deliver(method_frame, header_frame, body)
                        continue
                consumed, value = frame.decode_frame(buf[pos:end])
                pos = end
                self.bytes_received += consumed
                if value is not None:
                    self._process_frame(value)
                    if not self.is_open:
                        closing = True  # the connection is closing: pika's own loop takes the rest
                        break
        finally:
            if self.is_closed:
                self._frame_buffer = b""  # the stack was torn down: pika reset its state, unread bytes go too
            else:
                self._frame_buffer = buf[pos:] if pos < size else b""
        if closing and self._frame_buffer:
            super()._on_data_available(b"")

    def _take_delivery(self, buf: bytes, pos: int, end: int, number: int) -> tuple[int, Any]:
        """Decode the delivery whose method frame spans ``buf[pos:end]`` (no side effects).

        Returns (offset after its last frame, (channel, method frame, header frame,
        frame count, body)); (0, None) if its other frames are not all in *buf*
        yet; (-1, None) to leave it to pika (unknown channel, a content assembler
        not idle, a body of more than one frame, or frames out of order: pika
        reports those as it always does).
        """
        channel = self._channels.get(number)
        if channel is None:
            return -1, None
        assembler = channel._content_assembler
        if assembler._method_frame is not None or assembler._header_frame is not None or assembler._body_fragments:
            return -1, None
        if buf[end - 1] != _FRAME_END:
            raise exceptions.InvalidFrameError("Invalid FRAME_END marker")
        size = len(buf)
        if size - end < 7:
            return 0, None
        kind, header_channel, header_length = _ENVELOPE.unpack_from(buf, end)
        header_end = end + header_length + 8
        if kind != _HEADER or header_channel != number or header_length < 14:
            return -1, None
        if header_end > size:
            return 0, None
        class_id, _weight, body_size = _HEADER_START.unpack_from(buf, end + 7)
        if class_id != _BASIC_CLASS or buf[header_end - 1] != _FRAME_END:
            return -1, None
        if body_size == 0:
            body, last = b"", header_end
            frames = 2
        else:
            if size - header_end < 7:
                return 0, None
            kind, body_channel, body_length = _ENVELOPE.unpack_from(buf, header_end)
            if kind != _BODY or body_channel != number or body_length != body_size:
                return -1, None  # several body frames (or a protocol error): pika assembles them
            last = header_end + body_length + 8
            if last > size:
                return 0, None
            if buf[last - 1] != _FRAME_END:
                raise exceptions.InvalidFrameError("Invalid FRAME_END marker")
            body = buf[header_end + 7:last - 1]
            frames = 3

        method = spec.Basic.Deliver()
        method.consumer_tag, offset = _short_string(buf, pos + 11)
        method.delivery_tag, bits = _TAG_AND_BITS.unpack_from(buf, offset)
        method.redelivered = bool(bits & 1)
        method.exchange, offset = _short_string(buf, offset + 9)
        method.routing_key, offset = _short_string(buf, offset)
        if offset != end - 1:
            return -1, None  # fields that do not fill the frame exactly: pika decodes it its own way
        properties = spec.BasicProperties()
        # A slice, as pika decodes it: a property list running past its frame fails here too.
        properties.decode(buf[end + 19:header_end - 1])

        return last, (channel, frame.Method(number, method), frame.Header(number, body_size, properties), frames, body)
