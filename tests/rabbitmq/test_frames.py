"""The RabbitMQ plugin's publish frames are exactly pika's (no broker traffic)."""

from __future__ import annotations

import math

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pika import frame, spec

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import OutboundMessage
from ackbridge_rabbitmq import codec, frames, queues

# Either side of the 255-byte short-string limit, in one- and two-byte characters.
_short = st.text(max_size=40) | st.text(alphabet="aé", min_size=120, max_size=260)

messages = st.builds(
    OutboundMessage,
    body=st.binary(max_size=700),
    headers=st.just({}) | st.dictionaries(st.text(max_size=8), st.integers(-2**40, 2**40) | st.text(max_size=8),
                                          max_size=3),
    message_id=st.none() | _short,
    correlation_id=st.none() | _short,
    reply_to=st.none() | _short,
    content_type=st.none() | _short,
    timestamp=st.none() | st.floats(min_value=-10.0, max_value=2**40, allow_nan=False),
    persistent=st.booleans(),
)


def pika_frames(channel: int, exchange: str, key: str, message: OutboundMessage, message_id: str,
                body_max: int) -> list[bytes]:
    """What pika's Channel.basic_publish(..., mandatory=True) hands its transport."""
    props = pika.BasicProperties(**codec.property_fields(message, message_id))
    out = [frame.Method(channel, spec.Basic.Publish(exchange=exchange, routing_key=key, mandatory=True)).marshal(),
           frame.Header(channel, len(message.body), props).marshal()]
    body = message.body
    for chunk in range(math.ceil(len(body) / body_max)):
        out.append(frame.Body(channel, body[chunk * body_max:(chunk + 1) * body_max]).marshal())
    return out


def ours(channel: int, exchange: str, key: str, message: OutboundMessage, message_id: str,
         body_max: int) -> list[bytes]:
    return frames.publish_frames(channel, frames.publish_method(exchange, key),
                                 frames.content_header(message, message_id), message.body, body_max)


@settings(max_examples=500, deadline=None)
@given(message=messages, generated_id=_short, channel=st.integers(1, 2047), body_max=st.sampled_from([100, 131064]),
       destination=st.sampled_from(["q", "", "amq.topic/a.b", "ex/ü"]))
def test_frames_are_pikas(message: OutboundMessage, generated_id: str, channel: int, body_max: int,
                          destination: str) -> None:
    exchange, key = queues.parse_destination(destination) if destination else ("", "")
    message_id = message.message_id or generated_id
    try:
        expected = pika_frames(channel, exchange, key, message, message_id, body_max)
    except Exception:  # pika cannot send it: neither may we (the publish is refused)
        with pytest.raises(Exception):  # noqa: B017 - ValueError here, pika's ShortStringTooLong there
            ours(channel, exchange, key, message, message_id, body_max)
        return
    assert ours(channel, exchange, key, message, message_id, body_max) == expected


def test_long_message_id_refused() -> None:
    with pytest.raises(ValueError):
        frames.content_header(OutboundMessage(b"x", message_id="m" * 300), "m" * 300)


def test_float_header_refused() -> None:
    with pytest.raises(InvalidOptionError, match="float"):
        frames.content_header(OutboundMessage(b"x", headers={"f": 1.5}), "id")
