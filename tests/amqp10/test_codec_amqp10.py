"""The AMQP 1.0 publish encoder writes exactly what proton writes (no broker needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from ackbridge.messages import OutboundMessage
from ackbridge_amqp10 import codec

_text = st.text(max_size=300)
# Long enough to cross every short/long encoding boundary (255 bytes) on its own.
_long_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=60, max_size=140)

messages = st.builds(
    OutboundMessage,
    body=st.binary(max_size=600),
    message_id=st.none() | _text | _long_text,
    correlation_id=st.none() | _text | _long_text,
    reply_to=st.none() | _text,
    content_type=st.none() | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=300),
    timestamp=st.none() | st.floats(min_value=-1e10, max_value=1e12, allow_nan=False),
    persistent=st.booleans(),
)


@settings(max_examples=600, deadline=None)
@given(messages)
def test_bare_messages_encode_as_proton_does(message: OutboundMessage) -> None:
    assert codec.encode(message) == bytes(codec.to_proton(message).encode())


@pytest.mark.parametrize("size", [0, 1, 200, 250, 251, 252, 253, 254, 255, 256, 300, 70_000])
def test_size_boundaries(size: int) -> None:
    for message in (OutboundMessage(b"b" * size), OutboundMessage(b"", message_id="i" * size),
                    OutboundMessage(b"", message_id="i" * (size // 3), correlation_id="c" * (size // 3),
                                    reply_to="r" * (size // 3), content_type="t", timestamp=1.5)):
        assert codec._encode_bare(message) == bytes(codec.to_proton(message).encode())


def test_headers_go_through_proton_and_decode_back() -> None:
    message = OutboundMessage(b"body", headers={"n": 1, "s": "x", "b": b"\x00"}, message_id="m", persistent=True)
    decoded = Message()
    decoded.decode(codec.encode(message))
    assert decoded.properties == {"n": 1, "s": "x", "b": b"\x00"}
    assert decoded.id == "m" and decoded.durable and decoded.body == b"body"


def test_a_surrogate_is_left_to_proton_to_refuse() -> None:
    with pytest.raises(Exception):  # noqa: B017 - whatever proton raises, it raises here, on the caller
        codec.encode(OutboundMessage(b"", message_id="\ud800"))
