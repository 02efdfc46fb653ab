"""The AMQP 1.0 sections of the common records, written and read by hand.

rstream's encoder and decoder (pure Python) build a typed tree per field: on a
publish or a delivery that was most of the plugin's CPU. The common records
are simple enough to handle directly:

* written: the properties section (all 13 fields, the unset ones null, as
  rstream writes them) and the body as one data section. The bytes are exactly
  what rstream 1.1.1's encoder writes for the same values (but for an empty
  body, see :data:`EMPTY_DATA`): :mod:`~ackbridge_rabbitmq_streams.fastpath` checks
  rstream's version (and these bytes against rstream's on samples) and the
  codec falls back to rstream's encoder otherwise.
* read: a record that is one data section alone, or a properties section and
  at most one data section. Anything else (headers, annotations, several body
  sections, a field type not listed in :func:`_value`) is left to rstream's
  ``amqp_decoder`` (``None`` here).

Tests compare the bytes with rstream's encoder's (hypothesis), decode what is
written with rstream, proton and RabbitMQ's AMQP 0-9-1 conversion, and check
that the reader here tells what rstream's decoder tells.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

_U32 = struct.Struct(">L")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
#: described(smallulong 0x75 = data); then vbin8 / vbin32.
_DATA = b"\x00\x53\x75"
#: The whole prefix of a data section of each length up to 255 (vbin8), built once.
_DATA_SMALL = tuple(_DATA + b"\xa0" + bytes((size,)) for size in range(256))
_DATA_LARGE = _DATA + b"\xb0"
#: described(smallulong 0x73 = properties); then list8 / list32.
_PROPERTIES = b"\x00\x53\x73"
_NULL = b"\x40"
#: Field positions in the properties list (AMQP 1.0 part 3, 3.2.4).
MESSAGE_ID, REPLY_TO, CORRELATION_ID, CONTENT_TYPE, CREATION_TIME = 0, 4, 5, 6, 9
#: The properties list has 13 fields; rstream writes every one, null or not.
_COUNT = 13
_FIELDS = CREATION_TIME + 1
#: user-id, to, subject (between message-id and reply-to): null.
_NULLS_1_3 = _NULL * 3
#: content-encoding, absolute-expiry-time (between content-type and creation-time): null.
_NULLS_7_8 = _NULL * 2
#: group-id, group-sequence, reply-to-group-id (after creation-time): null.
_NULLS_10_12 = _NULL * 3
#: The properties section with no field set (what rstream writes for ``Properties()``).
EMPTY_PROPERTIES = _PROPERTIES + b"\xc0" + bytes((_COUNT + 1, _COUNT)) + _NULL * _COUNT


# ---- writing -------------------------------------------------------------------------------

#: An empty data section. rstream writes no body section at all for an empty body, and
#: RabbitMQ 3.10 fails to convert such a record for an AMQP 0-9-1 consumer of the stream
#: (``rabbit_msg_record:to_amqp091`` function_clause: the consumer's connection is closed,
#: 541 INTERNAL_ERROR). Both of the codec's paths add this after rstream's bytes.
EMPTY_DATA = _DATA_SMALL[0]


def data_section(body: bytes) -> bytes:
    """*body* as one data section (what rstream writes for ``AMQPMessage(body=...)``; for an
    empty body, :data:`EMPTY_DATA`)."""
    size = len(body)
    if size <= 255:
        return _DATA_SMALL[size] + body
    return _DATA_LARGE + _U32.pack(size) + body


def _variable(small: int, large: int, value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) <= 255:
        return bytes((small, len(data))) + data
    return bytes((large,)) + _U32.pack(len(data)) + data


def properties_section(*, message_id: str | None, reply_to: str | None, correlation_id: str | None,
                       content_type: str | None, creation_time: int | None) -> bytes:
    """The properties section holding the fields given, every other one null: strings as
    str8/str32, the content type as a symbol, the creation time as a timestamp, a list8 or
    list32 as rstream chooses (list8 while the fields take under 255 bytes)."""
    if (message_id is None and reply_to is None and correlation_id is None and content_type is None
            and creation_time is None):
        return EMPTY_PROPERTIES
    encoded = b"".join((
        _NULL if message_id is None else _variable(0xA1, 0xB1, message_id),
        _NULLS_1_3,
        _NULL if reply_to is None else _variable(0xA1, 0xB1, reply_to),
        _NULL if correlation_id is None else _variable(0xA1, 0xB1, correlation_id),
        _NULL if content_type is None else _variable(0xA3, 0xB3, content_type),
        _NULLS_7_8,
        _NULL if creation_time is None else b"\x83" + _I64.pack(creation_time),
        _NULLS_10_12,
    ))
    if len(encoded) < 255:
        # list8: the size byte counts the count byte too
        return _PROPERTIES + b"\xc0" + bytes((len(encoded) + 1, _COUNT)) + encoded
    return _PROPERTIES + b"\xd0" + _U32.pack(len(encoded) + 4) + _U32.pack(_COUNT) + encoded


# ---- reading -------------------------------------------------------------------------------

def bare_body(data: bytes) -> bytes | None:
    """The body of a record that is one data section and nothing else (what another client
    writes for a message without properties), or None for any other record."""
    if len(data) < 5:
        return None
    try:
        return _only_data_section(data, 0)
    except (IndexError, struct.error):
        return None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _value(data: bytes, at: int) -> tuple[Any, int]:
    """The value at *at*, as the codec reads it (text as ``str``, a timestamp as ``int``), and
    where the next one starts; KeyError for a type not read here."""
    code = data[at]
    at += 1
    if code == 0x40:
        return None, at
    if code in (0xA1, 0xA3, 0xA0):  # str8, sym8, vbin8
        end = at + 1 + data[at]
        return _text(data[at + 1:end]), end
    if code in (0xB1, 0xB3, 0xB0):  # str32, sym32, vbin32
        end = at + 4 + _U32.unpack_from(data, at)[0]
        return _text(data[at + 4:end]), end
    if code == 0x83:  # timestamp
        return _I64.unpack_from(data, at)[0], at + 8
    if code in (0x44, 0x43):  # ulong0, uint0
        return "0", at
    if code in (0x53, 0x52):  # smallulong, smalluint
        return str(data[at]), at + 1
    if code == 0x80:  # ulong
        return str(_U64.unpack_from(data, at)[0]), at + 8
    if code == 0x70:  # uint
        return str(_U32.unpack_from(data, at)[0]), at + 4
    if code == 0x98:  # uuid
        return str(uuid.UUID(bytes=bytes(data[at:at + 16]))), at + 16
    raise KeyError(code)


#: The fields read as text: a timestamp there is left to rstream's decoder (it tells an int).
_TEXT_FIELDS = (MESSAGE_ID, REPLY_TO, CORRELATION_ID, CONTENT_TYPE)


def properties_and_body(data: bytes) -> tuple[list[Any], bytes] | None:
    """(properties fields, at least up to CREATION_TIME; body) of a record that is a properties
    section and one data section (or none: an empty body), nothing else; None for any other
    record (or one that does not parse, or holds a value the codec would read otherwise than
    :func:`_value`: a timestamp in a text field, anything but a timestamp as creation time).

    The loop reads nulls and short strings in line and stops at the first null that begins a
    run of nulls to the list's end (one count of null bytes): a function call and a generator
    per field were a fifth of a delivery's CPU on the asyncio face."""
    if not data.startswith(_PROPERTIES) or len(data) < 5:
        return None
    try:
        if data.startswith(EMPTY_PROPERTIES):  # the commonest record: no field set
            at = len(EMPTY_PROPERTIES)
            bare = b"" if at == len(data) else _only_data_section(data, at)
            return None if bare is None else ([None] * _FIELDS, bare)
        code = data[3]
        if code == 0xC0:  # list8: size, count
            count, at, end = data[5], 6, 5 + data[4]
        elif code == 0xD0:  # list32
            count, at, end = _U32.unpack_from(data, 8)[0], 12, 8 + _U32.unpack_from(data, 4)[0]
        elif code == 0x45:  # list0
            count, at, end = 0, 4, 4
        else:
            return None
        if count > end - at:
            return None  # each field takes a byte at least: a damaged count (and no list that size)
        fields: list[Any] = [None] * (count if count > _FIELDS else _FIELDS)
        index = 0
        while index < count:
            code = data[at]
            if code == 0x40:  # null
                if end - at == count - index and data.count(0x40, at, end) == end - at:
                    at = end  # every field left is null (the common tail)
                    break
                at += 1
            elif code == 0xA1 or code == 0xA3 or code == 0xA0:  # str8, sym8, vbin8: as _value reads them
                if index == CREATION_TIME:
                    return None  # text where a timestamp belongs
                start = at + 2
                at = start + data[at + 1]
                if at > end:
                    return None
                fields[index] = data[start:at].decode("utf-8", "replace")
            else:
                value, at = _value(data, at)
                if type(value) is int:  # a timestamp
                    if index in _TEXT_FIELDS:
                        return None  # where text belongs: left to rstream's decoder
                elif index == CREATION_TIME:
                    return None  # anything but a timestamp (or null) as creation time
                fields[index] = value
            index += 1
        if at != end:
            return None
        # No data section: what rstream writes for an empty body.
        body = b"" if at == len(data) else _only_data_section(data, at)
        if body is None:
            return None
    except (KeyError, IndexError, struct.error, ValueError):
        return None
    return fields, body


def _only_data_section(data: bytes, at: int) -> bytes | None:
    """The body of the data section at *at* if it ends the record, else None."""
    if data[at:at + 3] != _DATA:
        return None
    code = data[at + 3]
    if code == 0xA0:
        start, size = at + 5, data[at + 4]
    elif code == 0xB0:
        start, size = at + 8, _U32.unpack_from(data, at + 4)[0]
    else:
        return None
    if start + size != len(data):
        return None
    return data[start:]
