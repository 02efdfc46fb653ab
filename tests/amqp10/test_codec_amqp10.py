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


def _through_proton_api(message: Message) -> dict[str, object]:
    """What proton's Message API says about a received message (the reference)."""
    def text(value: object) -> str | None:
        return None if value is None else value.decode() if isinstance(value, bytes) else str(value)

    content_type = message.content_type
    return {
        "message_id": text(message.id), "correlation_id": text(message.correlation_id),
        "reply_to": message.reply_to, "routing_key": message.subject,
        # proton's property turns a missing content type into symbol('None').
        "content_type": None if content_type == "None" else content_type or None,
        "timestamp": message.creation_time or None,
        "redelivered": not message.first_acquirer or message.delivery_count > 0,
    }


@settings(max_examples=300, deadline=None)
@given(messages, st.booleans(), st.integers(0, 5), st.none() | st.text(max_size=40))
def test_received_fields_read_through_the_c_binding_match_the_message_api(
        message: OutboundMessage, first: bool, count: int, subject: str | None) -> None:
    sent = codec.to_proton(message)
    sent.first_acquirer = first
    sent.delivery_count = count
    sent.subject = subject
    received = Message()
    received.decode(sent.encode())
    inbound = codec.from_proton(received, wire_tag=1, generation=1, source="q", count_header=True)
    expected = _through_proton_api(received)
    if message.content_type == "None":
        expected["content_type"] = "None"  # sent as such: only a missing one reads None
    assert {key: getattr(inbound, key) for key in expected} == expected
    assert inbound.delivery_count == count + 1
    assert inbound.body == message.body
